// Command gcu-k8s-plugin (gcu-stack stand-in): a Kubernetes device plugin that
// advertises N fake Enflame GCUs and hands them to containers. With --memory-unit it
// stands in for gcushare-device-plugin instead: each GCU's memory (--gcu-memory-mib) is
// advertised in shares of that many GiB (device IDs gcu<N>-<share>, under the resource
// name its DaemonSet gives, enflame.com/gcu-memory), and a container given shares of a
// GCU gets that GCU's device.
//
// It stands in for Enflame's gcu-k8s-plugin in the device-plugin image the tests
// build, so the project's DaemonSet runs it unchanged: `--resource-name` comes from
// the DaemonSet's args, the kubelet's device-plugin directory is the host path the
// DaemonSet mounts (/var/lib/kubelet/device-plugins).
//
// The devices ("the hardware") are character devices named gcu0, gcu1, ... in /dev, as
// the driver would create them; on a test node they are clones of /dev/null (c 1:3) that
// the node provides (devtools/realnode.py gives its node a /dev of its own, so nothing
// appears in the machine's /dev). The plugin advertises what it finds there and picks up
// devices that appear later; with --device-count it advertises exactly that many, a
// missing one Unhealthy. Only in a directory named explicitly (--device-dir or
// GCU_FAKE_DEVICE_DIR) does it create the missing ones itself (4 when there are none and
// no count is given; mknod needs CAP_MKNOD, which the project's DaemonSet drops).
// Allocate answers with one DeviceSpec per device, so the container gets
// /dev/gcu<N> for each GCU it was given. A device whose file disappears (or stops
// being a character device) is reported Unhealthy; when it comes back, Healthy.
//
// When the kubelet restarts it recreates kubelet.sock and removes every socket in
// the directory, ours included: the plugin notices either and registers again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Version is printed by --version and in --help.
const Version = "0.1.0-gcu-stack-standin"

// Config is everything the plugin is told, by flags or environment.
type Config struct {
	ResourceName  string        // extended resource, e.g. enflame.com/gcu
	DeviceCount   int           // how many fake GCUs; < 0: as many as the device directory holds
	PluginDir     string        // the kubelet's device-plugin directory (kubelet.sock lives there)
	DeviceDir     string        // where the device nodes gcu<N> are
	CreateDevices bool          // create missing device nodes (DeviceDir was named explicitly)
	HostDeviceDir string        // the same directory as the container runtime sees it (DeviceSpec.HostPath)
	SocketName    string        // our socket's file name inside PluginDir
	PollInterval  time.Duration // how often kubelet.sock, our socket and the device files are checked
	MemoryUnit    string        // GCU-share: advertise each GCU's memory in units of this many GiB ("" = whole GCUs)
	GcuMemoryMiB  int           // GCU-share: each GCU's memory
	UnitsPerGcu   int           // GCU-share: GcuMemoryMiB / MemoryUnit
}

// memoryUnits are the GCU-share shares a GCU's memory is cut into (spec.gcusharePlugin.memoryUnit), in GiB.
var memoryUnits = map[string]int{"1": 1, "0.1": 10, "0.01": 100, "0.001": 1000} // units per GiB

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func defaultSocketName(resource string) string {
	r := strings.NewReplacer("/", "-", ".", "-")
	return "fake-gcu-" + r.Replace(resource) + ".sock"
}

// parseFlags reads the command line and the GCU_FAKE_* environment.
func parseFlags(args []string, stdout, stderr io.Writer) (*Config, error) {
	fs := flag.NewFlagSet("gcu-k8s-plugin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := &Config{}
	count := -1
	if v := os.Getenv("GCU_FAKE_DEVICE_COUNT"); v != "" && v != "auto" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("GCU_FAKE_DEVICE_COUNT=%q is not a number of devices (or auto)", v)
		}
		count = n
	}
	fs.StringVar(&cfg.ResourceName, "resource-name", envOr("GCU_FAKE_RESOURCE_NAME", "enflame.com/gcu"),
		"extended resource to advertise (env GCU_FAKE_RESOURCE_NAME)")
	fs.IntVar(&cfg.DeviceCount, "device-count", count,
		"number of GCUs (env GCU_FAKE_DEVICE_COUNT); -1: the gcu<N> devices found in the device directory")
	fs.StringVar(&cfg.PluginDir, "device-plugin-path", envOr("GCU_FAKE_DEVICE_PLUGIN_PATH", pluginapi.DevicePluginPath),
		"the kubelet's device-plugin directory, holding kubelet.sock (env GCU_FAKE_DEVICE_PLUGIN_PATH)")
	fs.StringVar(&cfg.DeviceDir, "device-dir", os.Getenv("GCU_FAKE_DEVICE_DIR"),
		"directory of the device nodes gcu0.. (env GCU_FAKE_DEVICE_DIR; default /dev); when named, missing fake devices (c 1:3) are created there")
	fs.StringVar(&cfg.HostDeviceDir, "host-device-dir", os.Getenv("GCU_FAKE_HOST_DEVICE_DIR"),
		"the device directory's path on the node, if it differs inside this container (env GCU_FAKE_HOST_DEVICE_DIR; default --device-dir)")
	fs.StringVar(&cfg.SocketName, "socket-name", os.Getenv("GCU_FAKE_SOCKET_NAME"),
		"socket file name in the device-plugin directory (default derived from the resource name)")
	fs.DurationVar(&cfg.PollInterval, "poll-interval", time.Second, "how often sockets and device files are checked")
	fs.StringVar(&cfg.MemoryUnit, "memory-unit", os.Getenv("MEMORY_UNIT"),
		"GCU-share (the gcushare-device-plugin's flag): advertise each GCU's memory in units of 1, 0.1, 0.01 or 0.001 GiB (env MEMORY_UNIT)")
	memory := 16384
	if v := os.Getenv("GCU_FAKE_GCU_MEMORY_MIB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("GCU_FAKE_GCU_MEMORY_MIB=%q is not a number of MiB", v)
		}
		memory = n
	}
	fs.IntVar(&cfg.GcuMemoryMiB, "gcu-memory-mib", memory, "GCU-share: each GCU's memory in MiB (env GCU_FAKE_GCU_MEMORY_MIB; GFD's enflame.com/gcu.memory)")
	version := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() { fmt.Fprintln(stderr, "run gcu-k8s-plugin --help for the flags") }
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fmt.Fprintf(stdout, "Usage: gcu-k8s-plugin [flags]\n\n"+
				"gcu-stack stand-in for Enflame's GCU device plugin (%s): advertises fake GCUs\n"+
				"backed by character devices (c 1:3, like /dev/null) and allocates them as /dev/gcu<N>.\n\nFlags:\n", Version)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, flag.ErrHelp
		}
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *version {
		fmt.Fprintln(stdout, Version)
		return nil, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if cfg.DeviceCount < -1 {
		return nil, fmt.Errorf("--device-count must be a number of devices or -1 (discover), got %d", cfg.DeviceCount)
	}
	if cfg.ResourceName == "" || !strings.Contains(cfg.ResourceName, "/") {
		return nil, fmt.Errorf("--resource-name must look like vendor-domain/resource, got %q", cfg.ResourceName)
	}
	if cfg.MemoryUnit != "" {
		perGiB, ok := memoryUnits[cfg.MemoryUnit]
		if !ok {
			return nil, fmt.Errorf("--memory-unit must be 1, 0.1, 0.01 or 0.001 (GiB), got %q", cfg.MemoryUnit)
		}
		if cfg.UnitsPerGcu = cfg.GcuMemoryMiB * perGiB / 1024; cfg.UnitsPerGcu <= 0 {
			return nil, fmt.Errorf("--gcu-memory-mib %d is less than one --memory-unit %s GiB", cfg.GcuMemoryMiB, cfg.MemoryUnit)
		}
	}
	cfg.CreateDevices = cfg.DeviceDir != ""
	if cfg.DeviceDir == "" {
		cfg.DeviceDir = "/dev"
	}
	if cfg.HostDeviceDir == "" {
		cfg.HostDeviceDir = cfg.DeviceDir
	}
	if cfg.SocketName == "" {
		cfg.SocketName = defaultSocketName(cfg.ResourceName)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	return cfg, nil
}

// deviceID is the kubelet-facing ID of GCU i; its node is <dir>/gcu<i>.
func deviceID(i int) string { return "gcu" + strconv.Itoa(i) }

// shareID is the kubelet-facing ID of memory unit k of GCU i (GCU-share): gcu<i>-<k>.
func shareID(i, k int) string { return deviceID(i) + "-" + strconv.Itoa(k) }

// gcuOf is the GCU index of a device ID, whole (gcu<i>) or a share of one (gcu<i>-<k>).
func gcuOf(id string) (int, error) {
	index, _, _ := strings.Cut(strings.TrimPrefix(id, "gcu"), "-")
	if !strings.HasPrefix(id, "gcu") {
		return -1, fmt.Errorf("not a GCU device ID")
	}
	return strconv.Atoi(index)
}

// DefaultCount is how many devices are created (in a named directory) when none are found and no count is given.
const DefaultCount = 4

var deviceName = regexp.MustCompile(`^gcu([0-9]+)$`)

// discover returns 1 + the highest N of the gcu<N> character devices in dir (0: none).
func discover(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	count := 0
	for _, e := range entries {
		m := deviceName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join(dir, e.Name()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			continue
		}
		if n, _ := strconv.Atoi(m[1]); n+1 > count {
			count = n + 1
		}
	}
	return count
}

// ensureDevices settles cfg.DeviceCount (auto: < 0, discover the devices; the plugin then also
// adds ones that appear later) and, in a directory named explicitly, creates the missing device
// nodes (c 1:3, mode 0666) where it may; one it may not create stays missing (and Unhealthy).
func ensureDevices(cfg *Config) (auto bool, err error) {
	auto = cfg.DeviceCount < 0
	if !cfg.CreateDevices {
		if auto {
			cfg.DeviceCount = discover(cfg.DeviceDir)
			if cfg.DeviceCount == 0 {
				log.Printf("no gcu<N> devices in %s yet: advertising none until some appear", cfg.DeviceDir)
			} else {
				log.Printf("found %d GCUs in %s", cfg.DeviceCount, cfg.DeviceDir)
			}
		}
		return auto, nil
	}
	if err := os.MkdirAll(cfg.DeviceDir, 0o755); err != nil {
		return auto, fmt.Errorf("cannot create the fake device directory %s: %w", cfg.DeviceDir, err)
	}
	if auto {
		if found := discover(cfg.DeviceDir); found > 0 {
			log.Printf("found %d GCUs in %s", found, cfg.DeviceDir)
			cfg.DeviceCount = found
			return auto, nil
		}
		cfg.DeviceCount = DefaultCount
		log.Printf("no gcu<N> devices in %s: creating %d", cfg.DeviceDir, DefaultCount)
	}
	created := 0
	for i := 0; i < cfg.DeviceCount; i++ {
		path := filepath.Join(cfg.DeviceDir, deviceID(i))
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err == nil {
			if st.Mode&unix.S_IFMT != unix.S_IFCHR {
				return auto, fmt.Errorf("%s exists and is not a character device: remove it or choose another --device-dir", path)
			}
			continue
		}
		if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil && !errors.Is(err, unix.EEXIST) {
			if errors.Is(err, unix.EPERM) {
				log.Printf("cannot create %s (mknod c 1 3: %v; no CAP_MKNOD): it is Unhealthy until the node provides it", path, err)
				continue
			}
			return auto, fmt.Errorf("mknod %s (c 1 3) failed: %w", path, err)
		}
		created++
		// mknod's mode is filtered by the umask.
		if err := os.Chmod(path, 0o666); err != nil {
			return auto, err
		}
	}
	if created > 0 {
		log.Printf("created %d fake GCUs in %s", created, cfg.DeviceDir)
	}
	return auto, nil
}

func deviceHealthy(cfg *Config, i int) bool {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(cfg.DeviceDir, deviceID(i)), &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR
}

// Plugin is the DevicePlugin gRPC service.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	cfg     *Config
	updates chan struct{} // closed and replaced whenever the device list changes
	health  []bool
	auto    bool // the devices were discovered: ones that appear later are added
	stop    chan struct{}
	lock    chan struct{} // a one-slot mutex usable in select
}

func NewPlugin(cfg *Config) *Plugin {
	p := &Plugin{cfg: cfg, updates: make(chan struct{}), stop: make(chan struct{}), lock: make(chan struct{}, 1)}
	p.health = make([]bool, cfg.DeviceCount)
	for i := range p.health {
		p.health[i] = deviceHealthy(cfg, i)
	}
	return p
}

func (p *Plugin) snapshot() ([]*pluginapi.Device, chan struct{}) {
	p.lock <- struct{}{}
	defer func() { <-p.lock }()
	devs := make([]*pluginapi.Device, 0, len(p.health)*max(1, p.cfg.UnitsPerGcu))
	for i, ok := range p.health {
		h := pluginapi.Healthy
		if !ok {
			h = pluginapi.Unhealthy
		}
		if p.cfg.UnitsPerGcu == 0 {
			devs = append(devs, &pluginapi.Device{ID: deviceID(i), Health: h})
			continue
		}
		for k := 0; k < p.cfg.UnitsPerGcu; k++ { // a GCU's shares are as healthy as the GCU
			devs = append(devs, &pluginapi.Device{ID: shareID(i, k), Health: h})
		}
	}
	return devs, p.updates
}

// checkHealth re-reads the device files (and, when discovering, looks for new ones); true if anything changed.
func (p *Plugin) checkHealth() bool {
	p.lock <- struct{}{}
	defer func() { <-p.lock }()
	changed := false
	if p.auto {
		if found := discover(p.cfg.DeviceDir); found > len(p.health) {
			log.Printf("%d GCUs in %s now (were %d)", found, p.cfg.DeviceDir, len(p.health))
			for len(p.health) < found {
				p.health = append(p.health, deviceHealthy(p.cfg, len(p.health)))
			}
			p.cfg.DeviceCount = found
			changed = true
		}
	}
	for i := range p.health {
		ok := deviceHealthy(p.cfg, i)
		if ok != p.health[i] {
			state := "Healthy"
			if !ok {
				state = "Unhealthy"
			}
			log.Printf("device %s is now %s", deviceID(i), state)
			p.health[i] = ok
			changed = true
		}
	}
	if changed {
		close(p.updates)
		p.updates = make(chan struct{})
	}
	return changed
}

func (p *Plugin) count() int {
	p.lock <- struct{}{}
	defer func() { <-p.lock }()
	return len(p.health)
}

func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		devs, changed := p.snapshot()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-p.stop:
			return nil
		case <-stream.Context().Done():
			return nil
		}
	}
}

func (p *Plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		cresp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
		var indexes []int
		seen := map[int]bool{}
		for _, id := range creq.DevicesIDs {
			i, err := gcuOf(id)
			if err != nil || i < 0 || i >= p.count() {
				return nil, fmt.Errorf("unknown device %q (this plugin has gcu0..gcu%d)", id, p.count()-1)
			}
			if !seen[i] { // shares of one GCU give the container that GCU once
				seen[i] = true
				indexes = append(indexes, i)
			}
		}
		sort.Ints(indexes)
		visible := make([]string, len(indexes))
		for k, i := range indexes {
			cresp.Devices = append(cresp.Devices, &pluginapi.DeviceSpec{
				ContainerPath: "/dev/" + deviceID(i),
				HostPath:      filepath.Join(p.cfg.HostDeviceDir, deviceID(i)),
				Permissions:   "rw",
			})
			visible[k] = strconv.Itoa(i)
		}
		cresp.Envs["GCU_FAKE_VISIBLE_DEVICES"] = strings.Join(visible, ",")
		log.Printf("allocate %v", creq.DevicesIDs)
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	return resp, nil
}

func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// fileID identifies a file instance: a recreated socket has another inode or ctime.
type fileID struct {
	ino   uint64
	ctime int64
}

func statID(path string) (fileID, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, false
	}
	return fileID{ino: st.Ino, ctime: st.Ctim.Nano()}, true
}

// serve listens on our socket; the returned server is stopped by the caller.
func (p *Plugin) serve() (*grpc.Server, error) {
	sock := filepath.Join(p.cfg.PluginDir, p.cfg.SocketName)
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %w", sock, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() {
		if err := srv.Serve(ln); err != nil {
			log.Printf("plugin server on %s stopped: %v", sock, err)
		}
	}()
	return srv, nil
}

func (p *Plugin) register(ctx context.Context) error {
	kubelet := filepath.Join(p.cfg.PluginDir, "kubelet.sock")
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.cfg.SocketName,
		ResourceName: p.cfg.ResourceName,
		Options:      &pluginapi.DevicePluginOptions{},
	}, grpc.WaitForReady(true))
	return err
}

// Run serves and keeps the plugin registered until ctx ends.
func Run(ctx context.Context, cfg *Config) error {
	auto, err := ensureDevices(cfg)
	if err != nil {
		return err
	}
	p := NewPlugin(cfg)
	p.auto = auto
	defer close(p.stop)
	kubeletSock := filepath.Join(cfg.PluginDir, "kubelet.sock")
	ourSock := filepath.Join(cfg.PluginDir, cfg.SocketName)
	log.Printf("gcu-k8s-plugin stand-in %s: %d fake GCUs as %s, devices in %s (node path %s), socket %s",
		Version, cfg.DeviceCount, cfg.ResourceName, cfg.DeviceDir, cfg.HostDeviceDir, ourSock)
	if cfg.UnitsPerGcu > 0 {
		log.Printf("GCU-share: each GCU's %d MiB as %d shares of %s GiB (device IDs gcu<N>-<share>)",
			cfg.GcuMemoryMiB, cfg.UnitsPerGcu, cfg.MemoryUnit)
	}

	var srv *grpc.Server
	var registeredWith fileID
	var servingOn fileID
	registered := false
	defer func() {
		if srv != nil {
			srv.Stop()
			os.Remove(ourSock)
		}
	}()
	ticker := time.NewTicker(cfg.PollInterval)
	defer ticker.Stop()
	waitingLogged := false
	for {
		p.checkHealth()
		kid, kubeletUp := statID(kubeletSock)
		sid, socketThere := statID(ourSock)
		switch {
		case !kubeletUp:
			if !waitingLogged {
				log.Printf("waiting for the kubelet: %s does not exist", kubeletSock)
				waitingLogged = true
			}
			registered = false
		case srv == nil || !socketThere || sid != servingOn:
			// (re)start our server: first start, or the kubelet removed our socket on restart
			if srv != nil {
				log.Printf("%s was removed (kubelet restart?): serving again", ourSock)
				srv.Stop()
			}
			var err error
			if srv, err = p.serve(); err != nil {
				return err
			}
			servingOn, _ = statID(ourSock)
			registered = false
			continue
		case !registered || kid != registeredWith:
			if registered {
				log.Printf("%s was recreated (kubelet restart): registering again", kubeletSock)
			}
			if err := p.register(ctx); err != nil {
				log.Printf("registration with %s failed (retrying): %v", kubeletSock, err)
			} else {
				log.Printf("registered %s with the kubelet", cfg.ResourceName)
				registered, registeredWith, waitingLogged = true, kid, false
			}
		}
		select {
		case <-ctx.Done():
			log.Printf("stopping")
			return nil
		case <-ticker.C:
		}
	}
}

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	cfg, err := parseFlags(os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gcu-k8s-plugin: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, cfg); err != nil {
		log.Printf("error: %v", err)
		os.Exit(1)
	}
}

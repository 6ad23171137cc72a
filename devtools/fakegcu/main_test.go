package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func TestFlagsDefaultsAndEnvironment(t *testing.T) {
	t.Setenv("GCU_FAKE_DEVICE_COUNT", "")
	t.Setenv("GCU_FAKE_DEVICE_DIR", "")
	var out, errOut bytes.Buffer
	cfg, err := parseFlags([]string{"--resource-name=enflame.com/gcu"}, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DeviceCount != -1 || cfg.PluginDir != "/var/lib/kubelet/device-plugins/" {
		t.Fatalf("defaults: %+v", cfg)
	}
	if cfg.DeviceDir != "/dev" || cfg.HostDeviceDir != "/dev" || cfg.CreateDevices {
		t.Fatalf("device dir defaults: %+v", cfg)
	}
	if cfg.SocketName != "fake-gcu-enflame-com-gcu.sock" {
		t.Fatalf("socket name: %q", cfg.SocketName)
	}

	t.Setenv("GCU_FAKE_DEVICE_COUNT", "7")
	t.Setenv("GCU_FAKE_DEVICE_DIR", "/somewhere/gcu")
	t.Setenv("GCU_FAKE_HOST_DEVICE_DIR", "/node/gcu")
	cfg, err = parseFlags(nil, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DeviceCount != 7 || cfg.DeviceDir != "/somewhere/gcu" || cfg.HostDeviceDir != "/node/gcu" || !cfg.CreateDevices {
		t.Fatalf("environment not honoured: %+v", cfg)
	}
	// a flag wins over the environment
	cfg, err = parseFlags([]string{"--device-count=2"}, &out, &errOut)
	if err != nil || cfg.DeviceCount != 2 {
		t.Fatalf("flag over env: %+v %v", cfg, err)
	}
}

func TestHelpGoesToStdoutAndBadInputIsAnError(t *testing.T) {
	var out, errOut bytes.Buffer
	_, err := parseFlags([]string{"--help"}, &out, &errOut)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "Usage: gcu-k8s-plugin") ||
		!strings.Contains(out.String(), "-resource-name") {
		t.Fatalf("--help: err=%v stdout=%q", err, out.String())
	}
	for _, args := range [][]string{{"--bogus"}, {"--resource-name=nodomain"}, {"--device-count=-2"}, {"extra"}} {
		if _, err := parseFlags(args, &out, &errOut); err == nil || errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%v: want an error, got %v", args, err)
		}
	}
	t.Setenv("GCU_FAKE_DEVICE_COUNT", "many")
	if _, err := parseFlags(nil, &out, &errOut); err == nil || !strings.Contains(err.Error(), "GCU_FAKE_DEVICE_COUNT") {
		t.Fatalf("bad env: %v", err)
	}
}

// fakeKubelet is the kubelet's Registration service on <dir>/kubelet.sock.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	srv  *grpc.Server
	reqs chan *pluginapi.RegisterRequest
}

func startKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	sock := filepath.Join(dir, "kubelet.sock")
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{srv: grpc.NewServer(), reqs: make(chan *pluginapi.RegisterRequest, 10)}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go k.srv.Serve(ln)
	return k
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.reqs <- r
	return &pluginapi.Empty{}, nil
}

func (k *fakeKubelet) waitRegistration(t *testing.T) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case r := <-k.reqs:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("the plugin did not register with the kubelet")
		return nil
	}
}

func pluginClient(t *testing.T, cfg *Config) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(cfg.PluginDir, cfg.SocketName),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

func recvDevices(t *testing.T, s pluginapi.DevicePlugin_ListAndWatchClient) map[string]string {
	t.Helper()
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range resp.Devices {
		got[d.ID] = d.Health
	}
	return got
}

func TestPluginRegistersAllocatesWatchesHealthAndSurvivesKubeletRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := &Config{ResourceName: "enflame.com/gcu", DeviceCount: 3, PluginDir: dir,
		DeviceDir: filepath.Join(dir, "devs"), CreateDevices: true, HostDeviceDir: "/on/the/node", SocketName: "fake-gcu.sock",
		PollInterval: 50 * time.Millisecond}
	kubelet := startKubelet(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()

	r := kubelet.waitRegistration(t)
	if r.Version != "v1beta1" || r.ResourceName != "enflame.com/gcu" || r.Endpoint != "fake-gcu.sock" {
		t.Fatalf("registration: %+v", r)
	}
	for i := 0; i < 3; i++ {
		var st unix.Stat_t
		p := filepath.Join(cfg.DeviceDir, deviceID(i))
		if err := unix.Stat(p, &st); err != nil {
			t.Fatalf("device node %s: %v (creating it needs root / CAP_MKNOD)", p, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(uint64(st.Rdev)) != 1 || unix.Minor(uint64(st.Rdev)) != 3 {
			t.Fatalf("%s is not c 1:3: mode %o rdev %d", p, st.Mode, st.Rdev)
		}
	}

	client := pluginClient(t, cfg)
	watch, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"gcu0": "Healthy", "gcu1": "Healthy", "gcu2": "Healthy"}
	if got := recvDevices(t, watch); len(got) != 3 || got["gcu0"] != "Healthy" || got["gcu2"] != "Healthy" {
		t.Fatalf("devices: %v, want %v", got, want)
	}

	resp, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIDs: []string{"gcu2", "gcu0"}}, {DevicesIDs: []string{"gcu1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	first := resp.ContainerResponses[0]
	if len(first.Devices) != 2 || first.Devices[0].ContainerPath != "/dev/gcu0" ||
		first.Devices[0].HostPath != "/on/the/node/gcu0" || first.Devices[1].ContainerPath != "/dev/gcu2" ||
		first.Devices[0].Permissions != "rw" || first.Envs["GCU_FAKE_VISIBLE_DEVICES"] != "0,2" {
		t.Fatalf("allocation: %+v", first)
	}
	if d := resp.ContainerResponses[1].Devices; len(d) != 1 || d[0].ContainerPath != "/dev/gcu1" {
		t.Fatalf("second container: %+v", d)
	}
	if _, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIDs: []string{"gcu9"}}}}); err == nil || !strings.Contains(err.Error(), "unknown device") {
		t.Fatalf("unknown device: %v", err)
	}

	// A device file that vanishes makes the device Unhealthy; back, Healthy again.
	dev1 := filepath.Join(cfg.DeviceDir, "gcu1")
	if err := os.Remove(dev1); err != nil {
		t.Fatal(err)
	}
	if got := recvDevices(t, watch); got["gcu1"] != "Unhealthy" || got["gcu0"] != "Healthy" {
		t.Fatalf("after removing gcu1: %v", got)
	}
	if err := unix.Mknod(dev1, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if got := recvDevices(t, watch); got["gcu1"] != "Healthy" {
		t.Fatalf("after recreating gcu1: %v", got)
	}

	// A kubelet restart: it removes every socket in the directory and makes a new kubelet.sock.
	kubelet.srv.Stop()
	os.Remove(filepath.Join(dir, "kubelet.sock"))
	os.Remove(filepath.Join(dir, cfg.SocketName))
	time.Sleep(200 * time.Millisecond)
	kubelet = startKubelet(t, dir)
	if r := kubelet.waitRegistration(t); r.ResourceName != "enflame.com/gcu" {
		t.Fatalf("re-registration: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(dir, cfg.SocketName)); err != nil {
		t.Fatalf("the plugin did not serve its socket again: %v", err)
	}
	fresh := pluginClient(t, cfg)
	if _, err := fresh.GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
		t.Fatalf("plugin not answering after the restart: %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if _, err := os.Stat(filepath.Join(dir, cfg.SocketName)); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
	kubelet.srv.Stop()
}

func mknod(t *testing.T, path string) {
	t.Helper()
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatalf("mknod %s (needs root): %v", path, err)
	}
}

func TestDevicesAreDiscoveredAndNewOnesPickedUp(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"gcu0", "gcu1", "gcu3"} {
		mknod(t, filepath.Join(dir, n))
	}
	os.WriteFile(filepath.Join(dir, "gcu9"), []byte("not a device"), 0o644)
	os.WriteFile(filepath.Join(dir, "README"), []byte("x"), 0o644)
	// like /dev: the directory is not named explicitly, nothing is created
	cfg := &Config{ResourceName: "enflame.com/gcu", DeviceCount: -1, PluginDir: dir, DeviceDir: dir}
	auto, err := ensureDevices(cfg)
	if err != nil || !auto {
		t.Fatal(auto, err)
	}
	// gcu0..gcu3, gcu2 missing (Unhealthy); gcu9 is no device
	if cfg.DeviceCount != 4 {
		t.Fatalf("discovered %d devices, want 4", cfg.DeviceCount)
	}
	if _, err := os.Stat(filepath.Join(dir, "gcu2")); !os.IsNotExist(err) {
		t.Fatalf("gcu2 was created in a directory that was not named: %v", err)
	}
	p := NewPlugin(cfg)
	p.auto = auto
	devs, _ := p.snapshot()
	if len(devs) != 4 || devs[2].Health != "Unhealthy" || devs[3].Health != "Healthy" {
		t.Fatalf("health: %v", devs)
	}
	// a device appearing later (the driver loaded after the plugin started) is added
	mknod(t, filepath.Join(dir, "gcu5"))
	if !p.checkHealth() {
		t.Fatal("gcu5 not noticed")
	}
	devs, _ = p.snapshot()
	if len(devs) != 6 || devs[5].Health != "Healthy" || devs[4].Health != "Unhealthy" {
		t.Fatalf("after gcu5 appeared: %v", devs)
	}

	// none there and /dev-like: none advertised, none created
	empty := t.TempDir()
	cfg = &Config{ResourceName: "enflame.com/gcu", DeviceCount: -1, PluginDir: empty, DeviceDir: empty}
	if _, err := ensureDevices(cfg); err != nil || cfg.DeviceCount != 0 || discover(empty) != 0 {
		t.Fatalf("count %d, err %v", cfg.DeviceCount, err)
	}
}

func TestANamedDeviceDirectoryGetsFakeDevices(t *testing.T) {
	root := t.TempDir()
	cfg := &Config{ResourceName: "enflame.com/gcu", DeviceCount: -1, PluginDir: root,
		DeviceDir: filepath.Join(root, "fake-gcu"), CreateDevices: true}
	if _, err := ensureDevices(cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.DeviceCount != DefaultCount || discover(cfg.DeviceDir) != DefaultCount {
		t.Fatalf("created %d, discover %d; want %d", cfg.DeviceCount, discover(cfg.DeviceDir), DefaultCount)
	}
	cfg = &Config{ResourceName: "enflame.com/gcu", DeviceCount: 6, PluginDir: root,
		DeviceDir: filepath.Join(root, "fake-gcu"), CreateDevices: true}
	if _, err := ensureDevices(cfg); err != nil || discover(cfg.DeviceDir) != 6 {
		t.Fatalf("count 6: %v, %d devices", err, discover(cfg.DeviceDir))
	}
}

func TestAnExistingNonDeviceFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := &Config{ResourceName: "enflame.com/gcu", DeviceCount: 1, PluginDir: dir, DeviceDir: dir, CreateDevices: true}
	if err := os.WriteFile(filepath.Join(dir, "gcu0"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ensureDevices(cfg)
	if err == nil || !strings.Contains(err.Error(), "not a character device") {
		t.Fatalf("want a clear error, got %v", err)
	}
}

func TestGcuShareAdvertisesEachGcusMemoryInSharesAndAllocatesTheirGcus(t *testing.T) {
	var out, errOut bytes.Buffer
	cfg, err := parseFlags([]string{"--resource-name=enflame.com/gcu-memory", "--memory-unit=1", "--gcu-memory-mib=4096"}, &out, &errOut)
	if err != nil || cfg.UnitsPerGcu != 4 {
		t.Fatalf("4 GiB in shares of 1 GiB: %+v, %v", cfg, err)
	}
	t.Setenv("MEMORY_UNIT", "0.1") // what the GCU-share DaemonSet's env says, when no flag does
	if cfg, err = parseFlags([]string{"--gcu-memory-mib=2048"}, &out, &errOut); err != nil || cfg.UnitsPerGcu != 20 {
		t.Fatalf("MEMORY_UNIT=0.1: %+v, %v", cfg, err)
	}
	for _, args := range [][]string{{"--memory-unit=0.5"}, {"--memory-unit=1", "--gcu-memory-mib=512"}} {
		if _, err := parseFlags(args, &out, &errOut); err == nil {
			t.Fatalf("%v: want an error", args)
		}
	}

	dir := t.TempDir()
	cfg = &Config{ResourceName: "enflame.com/gcu-memory", DeviceCount: 2, PluginDir: dir, DeviceDir: filepath.Join(dir, "devs"),
		CreateDevices: true, HostDeviceDir: "/on/the/node", SocketName: "fake-gcushare.sock", PollInterval: 50 * time.Millisecond,
		MemoryUnit: "1", GcuMemoryMiB: 3072, UnitsPerGcu: 3}
	kubelet := startKubelet(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = Run(ctx, cfg) }()
	if r := kubelet.waitRegistration(t); r.ResourceName != "enflame.com/gcu-memory" {
		t.Fatalf("registration: %+v", r)
	}
	client := pluginClient(t, cfg)
	watch, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	got := recvDevices(t, watch)
	if len(got) != 6 || got["gcu0-0"] != "Healthy" || got["gcu1-2"] != "Healthy" {
		t.Fatalf("two GCUs of three shares each: %v", got)
	}
	resp, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIDs: []string{"gcu1-0", "gcu1-2"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if d := resp.ContainerResponses[0].Devices; len(d) != 1 || d[0].ContainerPath != "/dev/gcu1" || d[0].HostPath != "/on/the/node/gcu1" {
		t.Fatalf("two shares of GCU 1 give the container /dev/gcu1 once: %+v", d)
	}
	// A GCU's shares are as healthy as the GCU.
	if err := os.Remove(filepath.Join(cfg.DeviceDir, "gcu0")); err != nil {
		t.Fatal(err)
	}
	if got := recvDevices(t, watch); got["gcu0-1"] != "Unhealthy" || got["gcu1-1"] != "Healthy" {
		t.Fatalf("after removing gcu0: %v", got)
	}
}

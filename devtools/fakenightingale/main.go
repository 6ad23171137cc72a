// Command fakenightingale stands in for the six parts of Nightingale that gcu-stack deploys (mysql, redis,
// prometheus, nserver, nwebapi, agentd), one role per image: `fakenightingale <role> [flags]`.
//
// Each role starts, listens on the port its Deployment declares and reaches the others the way the real parts are
// configured by the stack: the database at MYSQL_HOST:MYSQL_PORT with the password the Secret gives
// (MYSQL_ROOT_PASSWORD for the database, MYSQL_PASSWORD for its clients), Redis at REDIS_ADDR, Prometheus at
// PROMETHEUS_URL, the server the agents report to at NSERVER_ADDR. What they prove on a real node is the stack's
// part: Services, cluster DNS names, the Secret, the volume, the NodePort, not Nightingale itself.
//
//   - mysql: refuses to initialise an empty data directory without MYSQL_ROOT_PASSWORD (as the official image
//     does), keeps the root password's hash in its data directory (so the data outlives the pod and a later
//     password is ignored, as with a real data directory), and answers the stand-ins' own line protocol on 3306:
//     "AUTH <user> <password>" then "PING". The real MySQL wire protocol is not needed between stand-ins.
//   - redis: Redis's inline commands on 6379 (PING answers +PONG), what a real Redis answers too.
//   - prometheus: reads --config.file (scrape_configs with static targets), writes to --storage.tsdb.path,
//     serves /-/ready and /api/v1/targets (Prometheus' own JSON shape) and scrapes each target every 10 s.
//   - nserver: connects to the database and Redis (exits after 2 minutes without them, as the server does),
//     then serves on 19000 the agents' heartbeats (POST /v1/n9e/heartbeat) and its view (GET /v1/status).
//   - agentd: sends NODE_NAME's heartbeat to NSERVER_ADDR every 5 s.
//   - nwebapi: connects like nserver, then serves on 18000 (the web UI's NodePort) GET /api/status: each part
//     as it reaches it at that moment (database login, Redis PING, Prometheus' readiness and targets, nserver's
//     agents).
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/yaml"
)

// MysqlStateFile is what the mysql role keeps in its data directory.
const MysqlStateFile = "standin-mysql.json"

// HeartbeatPath is where agents report to nserver.
const HeartbeatPath = "/v1/n9e/heartbeat"

// connectFor is how long nserver and nwebapi try the database and Redis before they give up.
var connectFor = 2 * time.Minute

func main() {
	log.SetFlags(log.LstdFlags | log.LUTC)
	if len(os.Args) < 2 {
		log.Fatal("usage: fakenightingale mysql|redis|prometheus|nserver|nwebapi|agentd [flags]")
	}
	role, args := os.Args[1], os.Args[2:]
	log.SetPrefix(role + ": ")
	var err error
	switch role {
	case "mysql":
		err = runMysql(args)
	case "redis":
		err = serveLines(":6379", redisReply)
	case "prometheus":
		err = runPrometheus(args)
	case "nserver":
		err = runNserver()
	case "nwebapi":
		err = runNwebapi()
	case "agentd":
		err = runAgentd()
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// envs returns the variables' values, or an error naming the first that is not set.
func envs(names ...string) ([]string, error) {
	values := make([]string, len(names))
	for i, name := range names {
		if values[i] = os.Getenv(name); values[i] == "" {
			return nil, fmt.Errorf("%s is not set (the stack sets it in every Nightingale pod)", name)
		}
	}
	return values, nil
}

// ---------------------------------------------------------------------------------------------------- mysql

type mysqlState struct {
	RootPasswordSha256 string `json:"rootPasswordSha256"`
	Initialized        string `json:"initialized"`
	Starts             int    `json:"starts"`
}

func sha(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}

// openDataDir initialises `dir` on first use and counts a start; its state holds the root password's hash.
func openDataDir(dir, rootPassword string) (*mysqlState, error) {
	path := filepath.Join(dir, MysqlStateFile)
	state := &mysqlState{}
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(raw, state); err != nil {
			return nil, fmt.Errorf("%s is corrupt: %v", path, err)
		}
		log.Printf("data directory %s already holds a database (started %d times before); MYSQL_ROOT_PASSWORD is not read", dir, state.Starts)
	case errors.Is(err, os.ErrNotExist):
		if rootPassword == "" {
			return nil, errors.New("database is uninitialized and password option is not specified: " +
				"you need to specify MYSQL_ROOT_PASSWORD")
		}
		state = &mysqlState{RootPasswordSha256: sha(rootPassword), Initialized: time.Now().UTC().Format(time.RFC3339)}
		log.Printf("initializing database files in %s", dir)
	default:
		return nil, fmt.Errorf("can't read file '%s': %v", path, err)
	}
	state.Starts++
	out, _ := json.Marshal(state)
	if err := os.WriteFile(path, out, 0o600); err != nil {
		return nil, fmt.Errorf("can't create/write to file '%s': %v", path, err)
	}
	return state, nil
}

func runMysql(args []string) error {
	flags := flag.NewFlagSet("mysql", flag.ContinueOnError)
	dataDir := flags.String("datadir", "/var/lib/mysql", "the data directory (the stack mounts its volume here)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	state, err := openDataDir(*dataDir, os.Getenv("MYSQL_ROOT_PASSWORD"))
	if err != nil {
		return err
	}
	return serveLines(":3306", mysqlReply(state.RootPasswordSha256))
}

// mysqlReply answers one connection's lines: AUTH first, then PING.
func mysqlReply(passwordHash string) func(remote string) func(line string) (string, bool) {
	return func(remote string) func(string) (string, bool) {
		authenticated := false
		return func(line string) (string, bool) {
			fields := strings.SplitN(line, " ", 3)
			switch {
			case fields[0] == "AUTH" && len(fields) == 3:
				if fields[1] != "root" || sha(fields[2]) != passwordHash {
					log.Printf("access denied for user '%s' from %s", fields[1], remote)
					return fmt.Sprintf("ERR 1045 Access denied for user '%s'@'%s'", fields[1], remote), false
				}
				authenticated = true
				log.Printf("user '%s' logged in from %s", fields[1], remote)
				return "OK", true
			case fields[0] == "PING" && authenticated:
				return "PONG", true
			case fields[0] == "PING":
				return "ERR 1045 log in first", false
			}
			return fmt.Sprintf("ERR 1064 unknown command %q", fields[0]), false
		}
	}
}

// mysqlLogin logs in as root at addr and pings.
func mysqlLogin(addr, password string) error {
	replies, err := exchange(addr, "AUTH root "+password, "PING")
	// A refused login is answered, then the connection closed: the answer is the error, not what PING met.
	if len(replies) > 0 && replies[0] != "OK" {
		return errors.New(replies[0])
	}
	if err != nil {
		return err
	}
	if replies[1] != "PONG" {
		return errors.New(replies[1])
	}
	return nil
}

// ---------------------------------------------------------------------------------------------------- redis

func redisReply(remote string) func(line string) (string, bool) {
	return func(line string) (string, bool) {
		command, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch strings.ToUpper(command) {
		case "PING":
			return "+PONG", true
		case "QUIT":
			return "+OK", false
		}
		return fmt.Sprintf("-ERR unknown command '%s'", line), true
	}
}

func redisPing(addr string) error {
	replies, err := exchange(addr, "PING")
	if err != nil {
		return err
	}
	if replies[0] != "+PONG" {
		return errors.New(replies[0])
	}
	return nil
}

// ---------------------------------------------------------------------------------------------------- lines

// serveLines answers each connection's lines with reply(remote)(line) until it says to stop.
func serveLines(addr string, reply func(remote string) func(string) (string, bool)) error {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Printf("listening on %s", listener.Addr())
	for {
		conn, err := listener.Accept()
		if err != nil {
			return err
		}
		go func(conn net.Conn) {
			defer conn.Close()
			remote, _, _ := net.SplitHostPort(conn.RemoteAddr().String())
			answer := reply(remote)
			lines := bufio.NewScanner(conn)
			for lines.Scan() {
				text, more := answer(strings.TrimRight(lines.Text(), "\r"))
				if _, err := fmt.Fprintf(conn, "%s\r\n", text); err != nil || !more {
					return
				}
			}
		}(conn)
	}
}

// exchange sends each request line on one connection and returns the replies.
func exchange(addr string, requests ...string) ([]string, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	lines := bufio.NewScanner(conn)
	var replies []string
	for _, request := range requests {
		if _, err := fmt.Fprintf(conn, "%s\r\n", request); err != nil {
			return replies, err
		}
		if !lines.Scan() {
			if lines.Err() != nil {
				return replies, lines.Err()
			}
			return append(replies, "connection closed"), nil
		}
		replies = append(replies, strings.TrimRight(lines.Text(), "\r"))
	}
	return replies, nil
}

// ---------------------------------------------------------------------------------------------------- prometheus

// PrometheusConfig is the part of prometheus.yml the stand-in reads.
type PrometheusConfig struct {
	Global struct {
		ScrapeInterval string `json:"scrape_interval"`
	} `json:"global"`
	ScrapeConfigs []struct {
		JobName       string `json:"job_name"`
		MetricsPath   string `json:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `json:"targets"`
		} `json:"static_configs"`
	} `json:"scrape_configs"`
}

// Target is one entry of /api/v1/targets' activeTargets.
type Target struct {
	ScrapePool string `json:"scrapePool"`
	ScrapeURL  string `json:"scrapeUrl"`
	Health     string `json:"health"`
	LastError  string `json:"lastError"`
}

func loadPrometheusConfig(path string) (*PrometheusConfig, []Target, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("error loading config from %q: %v", path, err)
	}
	config := &PrometheusConfig{}
	if err := yaml.UnmarshalStrict(raw, config); err != nil {
		return nil, nil, fmt.Errorf("error loading config from %q: %v", path, err)
	}
	var targets []Target
	for _, job := range config.ScrapeConfigs {
		if job.JobName == "" {
			return nil, nil, fmt.Errorf("error loading config from %q: a scrape config has no job_name", path)
		}
		metricsPath := job.MetricsPath
		if metricsPath == "" {
			metricsPath = "/metrics"
		}
		for _, static := range job.StaticConfigs {
			for _, target := range static.Targets {
				targets = append(targets, Target{ScrapePool: job.JobName, ScrapeURL: "http://" + target + metricsPath,
					Health: "unknown"})
			}
		}
	}
	return config, targets, nil
}

func runPrometheus(args []string) error {
	flags := flag.NewFlagSet("prometheus", flag.ContinueOnError)
	configFile := flags.String("config.file", "prometheus.yml", "the configuration")
	storage := flags.String("storage.tsdb.path", "data/", "where samples are written")
	listen := flags.String("web.listen-address", ":9090", "where the API and UI listen")
	if err := flags.Parse(args); err != nil {
		return err
	}
	_, targets, err := loadPrometheusConfig(*configFile)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*storage, 0o755); err != nil {
		return fmt.Errorf("opening storage failed: %v", err)
	}
	if err := os.WriteFile(filepath.Join(*storage, "lock"), []byte(fmt.Sprint(os.Getpid())), 0o644); err != nil {
		return fmt.Errorf("opening storage failed: %v", err)
	}
	log.Printf("loaded %s: %d targets; storage at %s", *configFile, len(targets), *storage)
	var mu sync.Mutex
	go func() {
		client := &http.Client{Timeout: 5 * time.Second}
		for {
			for i := range targets {
				mu.Lock()
				url := targets[i].ScrapeURL
				mu.Unlock()
				health, lastError := "up", ""
				if response, err := client.Get(url); err != nil {
					health, lastError = "down", err.Error()
				} else {
					_ = response.Body.Close()
					if response.StatusCode != http.StatusOK {
						health, lastError = "down", "server returned HTTP status "+response.Status
					}
				}
				mu.Lock()
				targets[i].Health, targets[i].LastError = health, lastError
				mu.Unlock()
			}
			time.Sleep(10 * time.Second)
		}
	}()
	mux := http.NewServeMux()
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "Prometheus Server is Ready.") })
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "Prometheus Server is Healthy.") })
	mux.HandleFunc("/api/v1/targets", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		active := append([]Target{}, targets...)
		mu.Unlock()
		writeJSON(w, map[string]any{"status": "success", "data": map[string]any{"activeTargets": active}})
	})
	log.Printf("listening on %s", *listen)
	return http.ListenAndServe(*listen, mux)
}

// ---------------------------------------------------------------------------------------------------- nserver, nwebapi

// backends are the addresses every Nightingale pod is given.
type backends struct {
	mysql, password, redis string
}

func backendsFromEnv() (*backends, error) {
	v, err := envs("MYSQL_HOST", "MYSQL_PORT", "MYSQL_PASSWORD", "REDIS_ADDR")
	if err != nil {
		return nil, err
	}
	return &backends{mysql: net.JoinHostPort(v[0], v[1]), password: v[2], redis: v[3]}, nil
}

// connect waits until the database lets us in and Redis answers, as the server does before it serves.
func (b *backends) connect() error {
	deadline := time.Now().Add(connectFor)
	for {
		err := mysqlLogin(b.mysql, b.password)
		if err == nil {
			err = redisPing(b.redis)
		}
		if err == nil {
			log.Printf("connected to the database at %s and Redis at %s", b.mysql, b.redis)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %s: %v", connectFor, err)
		}
		log.Printf("waiting for the database at %s and Redis at %s: %v", b.mysql, b.redis, err)
		time.Sleep(2 * time.Second)
	}
}

func status(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}

func writeJSON(w http.ResponseWriter, value any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(value)
}

// Agents records the last heartbeat of each host.
type Agents struct {
	mu   sync.Mutex
	seen map[string]string
}

func (a *Agents) heartbeat(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST a heartbeat", http.StatusMethodNotAllowed)
		return
	}
	var beat struct {
		Hostname string `json:"hostname"`
	}
	if err := json.NewDecoder(r.Body).Decode(&beat); err != nil || beat.Hostname == "" {
		http.Error(w, "a heartbeat is {\"hostname\": ...}", http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	if _, known := a.seen[beat.Hostname]; !known {
		log.Printf("agent %s reports (from %s)", beat.Hostname, r.RemoteAddr)
	}
	a.seen[beat.Hostname] = time.Now().UTC().Format(time.RFC3339)
	a.mu.Unlock()
	writeJSON(w, map[string]string{"err": ""})
}

func (a *Agents) snapshot() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]string, len(a.seen))
	for host, at := range a.seen {
		out[host] = at
	}
	return out
}

func nserverHandler(b *backends, agents *Agents) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(HeartbeatPath, agents.heartbeat)
	mux.HandleFunc("/v1/status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"mysql": status(mysqlLogin(b.mysql, b.password)), "redis": status(redisPing(b.redis)),
			"agents": agents.snapshot()})
	})
	return mux
}

func runNserver() error {
	b, err := backendsFromEnv()
	if err != nil {
		return err
	}
	return serveConnected(b, ":19000", nserverHandler(b, &Agents{seen: map[string]string{}}))
}

// serveConnected serves on addr once the database and Redis answer, as the server and the web API do.
func serveConnected(b *backends, addr string, handler http.Handler) error {
	if err := b.connect(); err != nil {
		return err
	}
	log.Printf("listening on %s", addr)
	return http.ListenAndServe(addr, handler)
}

func getJSON(url string, into any) error {
	client := &http.Client{Timeout: 5 * time.Second}
	response, err := client.Get(url)
	if err != nil {
		return err
	}
	defer response.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(response.Body, 1<<20))
	if response.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d: %s", url, response.StatusCode, bytes.TrimSpace(body))
	}
	if into == nil {
		return nil
	}
	return json.Unmarshal(body, into)
}

func webapiHandler(b *backends, prometheusURL, nserverAddr string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/status", func(w http.ResponseWriter, _ *http.Request) {
		var targets struct {
			Data struct {
				ActiveTargets []Target `json:"activeTargets"`
			} `json:"data"`
		}
		prometheus := map[string]any{"url": prometheusURL}
		err := getJSON(prometheusURL+"/-/ready", nil)
		prometheus["ready"] = status(err)
		if err == nil {
			err = getJSON(prometheusURL+"/api/v1/targets", &targets)
			jobs := []string{}
			for _, target := range targets.Data.ActiveTargets {
				jobs = append(jobs, target.ScrapePool)
			}
			sort.Strings(jobs)
			prometheus["jobs"], prometheus["targets"] = jobs, status(err)
		}
		var nserver map[string]any
		err = getJSON("http://"+nserverAddr+"/v1/status", &nserver)
		writeJSON(w, map[string]any{
			"mysql":      status(mysqlLogin(b.mysql, b.password)),
			"redis":      status(redisPing(b.redis)),
			"prometheus": prometheus,
			"nserver":    map[string]any{"addr": nserverAddr, "status": status(err), "view": nserver},
		})
	})
	return mux
}

func runNwebapi() error {
	b, err := backendsFromEnv()
	if err != nil {
		return err
	}
	v, err := envs("PROMETHEUS_URL", "NSERVER_ADDR")
	if err != nil {
		return err
	}
	return serveConnected(b, ":18000", webapiHandler(b, strings.TrimRight(v[0], "/"), v[1]))
}

// ---------------------------------------------------------------------------------------------------- agentd

func heartbeat(client *http.Client, nserverAddr, hostname string) error {
	body, _ := json.Marshal(map[string]string{"hostname": hostname})
	response, err := client.Post("http://"+nserverAddr+HeartbeatPath, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer response.Body.Close()
	if response.StatusCode != http.StatusOK {
		return fmt.Errorf("nserver answered HTTP %d", response.StatusCode)
	}
	return nil
}

func runAgentd() error {
	v, err := envs("NSERVER_ADDR")
	if err != nil {
		return err
	}
	nserverAddr := v[0]
	hostname := os.Getenv("NODE_NAME")
	if hostname == "" {
		hostname, _ = os.Hostname()
	}
	client := &http.Client{Timeout: 5 * time.Second}
	last := ""
	for {
		state := status(heartbeat(client, nserverAddr, hostname))
		if state != last {
			log.Printf("heartbeat of %s to %s: %s", hostname, nserverAddr, state)
			last = state
		}
		time.Sleep(5 * time.Second)
	}
}

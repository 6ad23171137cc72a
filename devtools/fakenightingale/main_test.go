package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listenLines serves reply on a free loopback port and returns its address.
func listenLines(t *testing.T, reply func(string) func(string) (string, bool)) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := listener.Addr().String()
	_ = listener.Close()
	go func() { _ = serveLines(addr, reply) }()
	for i := 0; i < 100; i++ {
		if conn, err := net.Dial("tcp", addr); err == nil {
			_ = conn.Close()
			return addr
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s", addr)
	return ""
}

func TestMysqlInitialisesOnceAndKeepsTheFirstPassword(t *testing.T) {
	dir := t.TempDir()
	if _, err := openDataDir(dir, ""); err == nil || !strings.Contains(err.Error(), "MYSQL_ROOT_PASSWORD") {
		t.Fatalf("an empty data directory without a password must be refused, got %v", err)
	}
	first, err := openDataDir(dir, "s3cret")
	if err != nil || first.Starts != 1 {
		t.Fatalf("first start: %+v %v", first, err)
	}
	again, err := openDataDir(dir, "another")
	if err != nil || again.Starts != 2 || again.RootPasswordSha256 != sha("s3cret") {
		t.Fatalf("a data directory keeps its password and counts starts: %+v %v", again, err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, MysqlStateFile))
	if strings.Contains(string(raw), "s3cret") {
		t.Fatalf("the password itself is stored: %s", raw)
	}
}

func TestMysqlUnwritableDataDirectoryIsAnError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	_ = os.WriteFile(file, nil, 0o644)
	// (root writes anywhere, so a file where the directory should be stands for an unwritable one here; the
	// permission case itself is what the real-node test meets)
	if _, err := openDataDir(filepath.Join(file, "data"), "pw"); err == nil || !strings.Contains(err.Error(), "can't read file") {
		t.Fatalf("got %v", err)
	}
}

func TestMysqlLoginNeedsTheRootPassword(t *testing.T) {
	addr := listenLines(t, mysqlReply(sha("right")))
	if err := mysqlLogin(addr, "right"); err != nil {
		t.Fatalf("the right password: %v", err)
	}
	err := mysqlLogin(addr, "wrong")
	if err == nil || !strings.Contains(err.Error(), "Access denied for user 'root'") {
		t.Fatalf("the wrong password: %v", err)
	}
	if replies, _ := exchange(addr, "PING"); replies[0] != "ERR 1045 log in first" {
		t.Fatalf("PING before AUTH: %v", replies)
	}
}

func TestRedisAnswersInlinePing(t *testing.T) {
	addr := listenLines(t, redisReply)
	if err := redisPing(addr); err != nil {
		t.Fatal(err)
	}
	if replies, _ := exchange(addr, "", "FLUSHALL"); replies[1] != "-ERR unknown command 'FLUSHALL'" {
		t.Fatalf("%v", replies)
	}
}

func TestPrometheusReadsTheScrapeConfigsAndRefusesUnknownFields(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yml")
	_ = os.WriteFile(good, []byte(`global: {scrape_interval: 30s}
scrape_configs:
- job_name: prometheus
  static_configs: [{targets: ["localhost:9090"]}]
- job_name: gcu-exporter
  metrics_path: /metrics
  static_configs: [{targets: ["exporter.kube-system.svc:9400"]}]
`), 0o644)
	_, targets, err := loadPrometheusConfig(good)
	if err != nil || len(targets) != 2 || targets[1].ScrapeURL != "http://exporter.kube-system.svc:9400/metrics" {
		t.Fatalf("%+v %v", targets, err)
	}
	bad := filepath.Join(dir, "bad.yml")
	_ = os.WriteFile(bad, []byte("scrape_config:\n- job_name: x\n"), 0o644)
	if _, _, err := loadPrometheusConfig(bad); err == nil || !strings.Contains(err.Error(), "scrape_config") {
		t.Fatalf("a misspelt field must be refused: %v", err)
	}
}

func TestWebapiReportsEveryPartItReaches(t *testing.T) {
	connectFor = time.Second
	b := &backends{mysql: listenLines(t, mysqlReply(sha("pw"))), password: "pw", redis: listenLines(t, redisReply)}
	if err := b.connect(); err != nil {
		t.Fatal(err)
	}
	agents := &Agents{seen: map[string]string{}}
	nserver := httptest.NewServer(nserverHandler(b, agents))
	defer nserver.Close()
	if err := heartbeat(http.DefaultClient, strings.TrimPrefix(nserver.URL, "http://"), "node-a"); err != nil {
		t.Fatal(err)
	}
	prometheus := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/targets" {
			writeJSON(w, map[string]any{"data": map[string]any{"activeTargets": []Target{{ScrapePool: "gcu-exporter"}}}})
		}
	}))
	defer prometheus.Close()
	webapi := httptest.NewServer(webapiHandler(b, prometheus.URL, strings.TrimPrefix(nserver.URL, "http://")))
	defer webapi.Close()
	var got struct {
		Mysql, Redis string
		Prometheus   struct {
			Ready string
			Jobs  []string
		}
		Nserver struct {
			Status string
			View   struct{ Agents map[string]string }
		}
	}
	if err := getJSON(webapi.URL+"/api/status", &got); err != nil {
		t.Fatal(err)
	}
	if got.Mysql != "ok" || got.Redis != "ok" || got.Prometheus.Ready != "ok" || got.Nserver.Status != "ok" ||
		len(got.Prometheus.Jobs) != 1 || got.Nserver.View.Agents["node-a"] == "" {
		out, _ := json.Marshal(got)
		t.Fatalf("%s", out)
	}
	b.password = "wrong"
	if err := b.connect(); err == nil || !strings.Contains(err.Error(), "Access denied") {
		t.Fatalf("a wrong password must keep the server from starting: %v", err)
	}
}

#!/usr/bin/env bash
# Build (cached) the Pulumi toolchain from Go modules: the Pulumi CLI, a Python language host, the Python SDK's
# helper scripts and the resource provider plugins, then install the plugins into a PULUMI_HOME.
#
# Usage:
#   scripts/toolchain/pulumi.sh [build]                    build what is missing, install plugins into $PULUMI_HOME,
#                                                          print `export` lines on stdout (logs/timings go to stderr)
#   eval "$(scripts/toolchain/pulumi.sh env)"              only print the export lines (no build, no network)
#   scripts/toolchain/pulumi.sh install-plugins [HOME]     fast (~30 ms, no pulumi process): give a fresh PULUMI_HOME
#                                                          the cached provider plugins (default: $PULUMI_HOME)
#   scripts/toolchain/pulumi.sh status                     what was resolved/built, with sizes; says which plugins
#                                                          are substitutes and what they were built from
#   scripts/toolchain/pulumi.sh detect [--no-install]      is the `pulumi` on PATH usable as it is? Exit 0 if it is at
#                                                          least v$GCU_PULUMI_MIN_VERSION (default: the pinned SDK's
#                                                          version) and the engine has, or (unless --no-install) can
#                                                          install, the kubernetes plugin the pinned SDK asks for.
#                                                          Says which CLI/plugin it found, or why not, on stderr.
#
# Versions come from requirements.txt (pulumi, pulumi-kubernetes, pulumi-docker). Caches:
#   $GCU_CACHE_DIR (default ~/.cache/gcu-stack)/go/{mod,build}        GOMODCACHE / GOCACHE
#   $GCU_CACHE_DIR/pulumi-<v>/bin                                      the PATH dir: pulumi, pulumi-language-python,
#                                                                      pulumi-language-python-exec, pulumi-resource-pulumi-python
#   $GCU_CACHE_DIR/pulumi-language-python-<v>-<src hash>/bin           language host build
#   $GCU_CACHE_DIR/pulumi-python-scripts-<sdk v>/bin                   SDK helper scripts
#   $GCU_CACHE_DIR/pulumi-resource-<name>-<v>/bin                      provider builds
#   $GCU_CACHE_DIR/pulumi-home                                         default PULUMI_HOME (plugins installed here)
#
# Environment: GCU_CACHE_DIR, PULUMI_HOME, GO (a go binary to use), GCU_PULUMI_STRICT=1 (refuse substitutes),
#   GCU_PULUMI_CLI_FALLBACK, GCU_KUBERNETES_PROVIDER_REF, GCU_DOCKER_PROVIDER_REF (see "Sources" below),
#   GCU_PULUMI_MIN_VERSION (detect), GCU_TIMINGS_FILE (append "part<TAB>seconds<TAB>what" lines, read by .ci/run).
#
# Gotchas (found while making this work offline):
#  * requirements.txt pins stable releases (pulumi-kubernetes 4.25.0), whose plugins the official CLI downloads by
#    itself. The proxy here has no source for provider 4.25.0; the nearest it serves is the commit the pre-release
#    4.25.0a1768448096 was cut from (2026-01-15), so that commit is built and installed as plugin 4.25.0 - a
#    SUBSTITUTE, which the build log and `status` say; it reports 4.25.0+<commit>. Users with the official CLI never
#    see it (detect picks theirs).
#  * The Go module proxy reachable here is a partial mirror. It answers 403 "This module version is not available"
#    for github.com/pulumi/pulumi/pkg/v3@v3.272.0 (newest pkg/v3 zip it serves is v3.259.0), for every version of
#    github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3 and github.com/pulumi/pulumi-docker/provider/v4,
#    and serves exactly one github.com/pulumi/pulumi-kubernetes/provider/v4 build. Its sumdb also lacks some entries
#    (404), hence the narrow GONOSUMDB below; those modules are still checked against the provider's own go.sum.
#  * pulumi-kubernetes/pulumi-docker never tag their provider/ submodule, so `go install .../provider/v4@v4.34.2`
#    cannot work anywhere; the module is only reachable as a commit pseudo-version (v4.0.0-<time>-<sha>).
#  * pkg/v3 and the providers carry local `replace ../sdk` directives, so `go install mod@ver` refuses them. The CLI
#    is built in a throwaway tools module (repeating pkg's non-local replace); providers are built in a writable copy
#    of the downloaded module with the local replaces dropped (their requirement then resolves from the proxy).
#  * pulumi-resource-kubernetes go:embeds schema-embed.json, which is generated (cmd/.../generate.go) and not in the
#    module zip; we run the generator with VERSION set (that also stamps the schema version).
#  * The engine picks a provider plugin whose version EQUALS the one the Python SDK requests (pulumi-plugin.json), so
#    plugins are installed under the SDK's plugin version even when the binary was built from a substitute source.
#    Plugins on $PATH win over PULUMI_HOME regardless of version, so provider binaries are NOT put on PATH.
#  * Language plugins and pulumi-resource-pulumi-python (dynamic providers) are "bundled" plugins: the CLI looks for
#    them on $PATH and next to the real pulumi binary and warns if those differ, so they are copied (not symlinked)
#    into the same bin dir as pulumi.
#  * PULUMI_HOME/plugins entries must be real directories (the engine skips symlinked plugin dirs), so
#    install-plugins creates real dirs holding symlinks to the cached binaries.
#  * With a policy pack whose runtime has a language plugin, the engine runs the pack through the language host's
#    RunPlugin; pulumi-analyzer-policy-python is only a fallback when no language plugin exists and is not needed.
set -euo pipefail

SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
REPO_DIR="$(cd "$(dirname "$SELF")/../.." && pwd)"
REQUIREMENTS="${GCU_REQUIREMENTS:-$REPO_DIR/requirements.txt}"
CACHE_DIR="${GCU_CACHE_DIR:-$HOME/.cache/gcu-stack}"
DEFAULT_PULUMI_HOME="$CACHE_DIR/pulumi-home"
STRICT="${GCU_PULUMI_STRICT:-0}"

# ------------------------------------------------------------------------------------------------ Sources
# Substitutes, used only when the pinned source is not obtainable from the module proxy (never with STRICT=1).
# The newest github.com/pulumi/pulumi/pkg/v3 whose zip the proxy serves (3.260.0 .info exists, its zip is 403).
PULUMI_CLI_FALLBACK="${GCU_PULUMI_CLI_FALLBACK:-3.259.0}"
# Known provider/v4 pseudo-versions: "<pypi version of the SDK built from that commit>=<module version>".
# v4.0.0-20260115033456-f47bc2d6f199 is the only provider/v4 the proxy serves; PyPI pulumi-kubernetes
# 4.25.0a1768448096 is the SDK built from the same commit (1768448096 == 2026-01-15T03:34:56Z). The stable pin
# (4.25.0) has no entry, so this commit is its substitute (the build cache is keyed by the source, not the pin).
KUBERNETES_PROVIDER_REFS=("4.25.0a1768448096=v4.0.0-20260115033456-f47bc2d6f199")
KUBERNETES_PROVIDER_FALLBACK="4.25.0a1768448096"
DOCKER_PROVIDER_REFS=()        # none on the proxy
DOCKER_PROVIDER_FALLBACK=""
# Go: pulumi pkg/v3 v3.259.0 declares `go 1.25.11`; scripts/toolchain/go.sh fetches a Go if the machine has none.
GO_MIN_VERSION=1.25.11
# shellcheck source=go.sh
. "$(dirname "$SELF")/go.sh"

# ------------------------------------------------------------------------------------------------ helpers
REPORT_TAG=pulumi.sh REPORT_WIDTH=34
# shellcheck source=report.sh
. "$(dirname "$SELF")/report.sh"

# req_version NAME -> the version pinned as NAME==X in requirements.txt (PEP 503 name normalisation).
req_version() {
  local want v
  want="$(echo "$1" | tr 'A-Z_.' 'a-z--')"
  v="$(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$REQUIREMENTS" | awk -F'==' -v w="$want" '
      { n = tolower($1); gsub(/[_.]/, "-", n); sub(/\[.*$/, "", n); sub(/;.*$/, "", $2) }
      n == w && $2 != "" { print $2; exit }')"
  [ -n "$v" ] || die "no '$1==<version>' pin in $REQUIREMENTS"
  echo "$v"
}

# pep440_to_semver 4.25.0a1768448096 -> 4.25.0-alpha.1768448096 (how Pulumi SDKs write pulumi-plugin.json).
pep440_to_semver() {
  echo "$1" | sed -E -e 's/^([0-9]+\.[0-9]+\.[0-9]+)a([0-9]+)$/\1-alpha.\2/' \
    -e 's/^([0-9]+\.[0-9]+\.[0-9]+)b([0-9]+)$/\1-beta.\2/' -e 's/^([0-9]+\.[0-9]+\.[0-9]+)rc([0-9]+)$/\1-rc.\2/'
}


PULUMI_PIN="$(req_version pulumi)"
KUBERNETES_PIN="$(req_version pulumi-kubernetes)"
DOCKER_PIN="$(req_version pulumi-docker)"
# Plugin versions the SDKs request (= their pulumi-plugin.json "version").
KUBERNETES_PLUGIN_VERSION="$(pep440_to_semver "$KUBERNETES_PIN")"
DOCKER_PLUGIN_VERSION="$(pep440_to_semver "$DOCKER_PIN")"

RESOLVED_DIR="$CACHE_DIR/resolved"     # remembers which source was used for a pin, so warm runs need no network

go_env() {
  export GOMODCACHE="$CACHE_DIR/go/mod" GOCACHE="$CACHE_DIR/go/build"
  export GOFLAGS="-mod=mod -buildvcs=false"
  export GOTOOLCHAIN=local   # never let go switch toolchains behind our back
  # The provider/v4 pseudo-versions have no entry in the proxy's sumdb mirror (404), so they are not checksum-verified
  # (only fetched over TLS from GOPROXY); their dependencies are checked against the provider's own go.sum (some,
  # e.g. pulumi pkg/v3@v3.215.0, are missing from the sumdb mirror too).
  export GONOSUMDB="github.com/pulumi/pulumi-kubernetes/provider,github.com/pulumi/pulumi-docker/provider"
  export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"
}

# ------------------------------------------------------------------------------------------------ Go toolchain
GO_BIN=""
ensure_go() {
  local t0
  t0="$(now)"
  GO_BIN="$(go_pick "$GO_MIN_VERSION")"
  if [ -z "$GO_BIN" ]; then
    GO_BIN="$(go_fetch)" || die "no go >= $GO_MIN_VERSION on this machine and fetching go$GO_DOWNLOAD_VERSION failed"
    timing "go toolchain" "$(elapsed "$t0")" "downloaded go$GO_DOWNLOAD_VERSION"
  fi
  export PATH="$(dirname "$GO_BIN"):$PATH"
  log "using $GO_BIN (go$(go_version_of "$GO_BIN"))"
}

# mod_download MODULE@VERSION -> prints the module's source dir, or fails (with go's error on stderr).
mod_download() {
  local out dir
  out="$(go mod download -json "$1" 2>/dev/null || true)"
  dir="$(printf '%s' "$out" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' | head -n1)"
  if [ -z "$dir" ] || [ ! -d "$dir" ]; then
    printf '%s\n' "$out" | sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/\1/p' | sed 's/\\n/ /g; s/\\t/ /g' >&2
    return 1
  fi
  echo "$dir"
}

# ------------------------------------------------------------------------------------------------ Pulumi CLI
resolve_cli_version() {
  local rec="$RESOLVED_DIR/pulumi-cli-$PULUMI_PIN" v
  if [ -f "$rec" ] && [ -x "$CACHE_DIR/pulumi-$(cat "$rec")/bin/pulumi" ]; then cat "$rec"; return; fi
  for v in "$PULUMI_PIN" "$PULUMI_CLI_FALLBACK"; do
    if [ "$v" != "$PULUMI_PIN" ] && [ "$STRICT" = 1 ]; then
      die "github.com/pulumi/pulumi/pkg/v3@v$PULUMI_PIN is not available and GCU_PULUMI_STRICT=1"
    fi
    if mod_download "github.com/pulumi/pulumi/pkg/v3@v$v" >/dev/null; then
      mkdir -p "$RESOLVED_DIR"; echo "$v" > "$rec"; echo "$v"; return
    fi
    log "github.com/pulumi/pulumi/pkg/v3@v$v is not downloadable"
  done
  die "no buildable Pulumi CLI version (tried $PULUMI_PIN $PULUMI_CLI_FALLBACK)"
}

build_cli() {
  local v="$1" dir="$CACHE_DIR/pulumi-$1" t0 src pkgmod rep
  t0="$(now)"
  if [ -x "$dir/bin/pulumi" ]; then timing "pulumi CLI v$v" "$(elapsed "$t0")" cached; return; fi
  src="$dir/src"; mkdir -p "$src" "$dir/bin"
  pkgmod="$(mod_download "github.com/pulumi/pulumi/pkg/v3@v$v")" || die "cannot download pulumi pkg/v3@v$v"
  # Throwaway tools module: require pkg/v3 and repeat its non-local replace directives.
  {
    echo "module gcu-stack/tools/pulumi"
    echo
    echo "go $(sed -n 's/^go \([0-9.]*\).*/\1/p' "$pkgmod/go.mod")"
    echo
    echo "require github.com/pulumi/pulumi/pkg/v3 v$v"
    echo
    grep -E '^replace[[:space:]]' "$pkgmod/go.mod" | grep -vE '=>[[:space:]]*\.{1,2}/' || true
  } > "$src/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"\n' > "$src/tools.go"
  (cd "$src" && go mod tidy >&2 && \
   go build -trimpath -o "$dir/bin/pulumi.tmp" \
     -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$v" \
     github.com/pulumi/pulumi/pkg/v3/cmd/pulumi >&2)
  mv "$dir/bin/pulumi.tmp" "$dir/bin/pulumi"
  timing "pulumi CLI v$v" "$(elapsed "$t0")" built
}

# ------------------------------------------------------------------------------------------------ language host
# Stand-in for github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3, which the proxy does not serve.
write_langhost_source() {
  cat > "$1/main.go" <<'GO'
// pulumi-language-python for gcu-stack (generated by scripts/toolchain/pulumi.sh).
//
// The upstream language host module (github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3) cannot be
// downloaded from the Go module proxy available here, so this is a small stand-in. Like the upstream host it is a thin
// gRPC wrapper: it chooses the Python interpreter (virtualenv/toolchain from the project's runtime options, via the
// SDK's own python/toolchain package) and runs the SDK's `pulumi-language-python-exec` driver script, which does the
// actual work. Implemented: Handshake, GetPluginInfo, GetRequiredPackages (returns nothing: providers are loaded on
// demand, so an imported-but-unused SDK such as pulumi_docker never makes the engine fetch a plugin), Run,
// InstallDependencies (`pulumi install`, policy-pack venvs), RunPlugin (Python policy packs / plugins), About and
// GetProgramDependencies. Code generation (pulumi new/convert/package gen-sdk) is not implemented.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/logging"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/pulumi/pulumi/sdk/v3/python/toolchain"
)

// Set with -ldflags "-X main.version=...".
var version = "dev"

// The exec script exits with this code after it has already shown the user an actionable message.
const exitAfterUserMessage = 32

type host struct {
	pulumirpc.UnimplementedLanguageRuntimeServer
	engineAddress string
	tracing       string
}

func main() {
	// The engine passes logging flags (-v, --logtostderr; registered by glog), --tracing and the engine address as
	// the last argument. Older engines also passed runtime options as flags; accept and ignore those.
	tracing := flag.String("tracing", "", "Emit tracing to a Zipkin-compatible tracing endpoint")
	for _, name := range []string{"root", "virtualenv", "toolchain", "typechecker", "binary"} {
		flag.String(name, "", "ignored (runtime options arrive in ProgramInfo)")
	}
	flag.Bool("logflow", false, "ignored")
	flag.Parse()
	logging.InitLogging(false, 0, false)

	h := &host{tracing: *tracing}
	if args := flag.Args(); len(args) > 0 {
		h.engineAddress = args[0]
	}

	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, h)
			return nil
		},
		Options: rpcutil.OpenTracingServerInterceptorOptions(nil),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "fatal: could not start language host RPC server: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("%d\n", handle.Port)
	if err := <-handle.Done; err != nil {
		fmt.Fprintf(os.Stderr, "fatal: language host RPC stopped serving: %v\n", err)
		os.Exit(1)
	}
}

// toolchainFor resolves the Python toolchain (pip/poetry/uv + virtualenv) from a ProgramInfo.
func toolchainFor(info *pulumirpc.ProgramInfo) (toolchain.Toolchain, error) {
	opts := toolchain.PythonOptions{}
	if info != nil {
		opts.Root = info.GetRootDirectory()
		opts.ProgramDir = info.GetProgramDirectory()
		if o := info.GetOptions(); o != nil {
			m := o.AsMap()
			if v, ok := m["virtualenv"].(string); ok {
				opts.Virtualenv = v
			}
			if v, ok := m["toolchain"].(string); ok {
				switch strings.ToLower(v) {
				case "pip":
					opts.Toolchain = toolchain.Pip
				case "poetry":
					opts.Toolchain = toolchain.Poetry
				case "uv":
					opts.Toolchain = toolchain.Uv
				}
			}
		}
	}
	if opts.ProgramDir == "" {
		opts.ProgramDir = opts.Root
	}
	return toolchain.ResolveToolchain(opts)
}

// execScript finds the SDK's driver script: next to this binary (where pulumi.sh puts it), else on $PATH.
func execScript() (string, error) {
	const name = "pulumi-language-python-exec"
	if self, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(self); err == nil {
			self = real
		}
		candidate := filepath.Join(filepath.Dir(self), name)
		if _, err := os.Stat(candidate); err == nil {
			return candidate, nil
		}
	}
	return exec.LookPath(name)
}

func (h *host) Handshake(ctx context.Context, req *pulumirpc.LanguageHandshakeRequest,
) (*pulumirpc.LanguageHandshakeResponse, error) {
	if req.GetEngineAddress() != "" {
		h.engineAddress = req.GetEngineAddress()
	}
	return &pulumirpc.LanguageHandshakeResponse{}, nil
}

func (h *host) GetPluginInfo(ctx context.Context, _ *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version}, nil
}

func (h *host) GetRequiredPlugins(ctx context.Context, req *pulumirpc.GetRequiredPluginsRequest,
) (*pulumirpc.GetRequiredPluginsResponse, error) {
	return &pulumirpc.GetRequiredPluginsResponse{}, nil
}

func (h *host) GetRequiredPackages(ctx context.Context, req *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	return &pulumirpc.GetRequiredPackagesResponse{}, nil
}

func (h *host) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	tc, err := toolchainFor(req.GetInfo())
	if err != nil {
		return nil, err
	}
	// A missing virtualenv is reported with instructions rather than created implicitly; `pulumi install` creates it.
	if err := tc.ValidateVenv(ctx); err != nil {
		return nil, err
	}
	script, err := execScript()
	if err != nil {
		return nil, fmt.Errorf("could not find pulumi-language-python-exec: %w", err)
	}

	args := []string{"-u", script}
	add := func(k, v string) {
		if v != "" {
			args = append(args, "--"+k, v)
		}
	}
	add("monitor", req.GetMonitorAddress())
	add("engine", h.engineAddress)
	add("project", req.GetProject())
	add("stack", req.GetStack())
	add("pwd", req.GetPwd())
	add("dry_run", fmt.Sprintf("%v", req.GetDryRun()))
	add("parallel", fmt.Sprint(req.GetParallel()))
	add("tracing", h.tracing)
	add("organization", req.GetOrganization())
	add("root_directory", req.GetInfo().GetRootDirectory())
	program := req.GetProgram()
	if program == "" {
		program = "."
	}
	args = append(args, program)
	args = append(args, req.GetArgs()...)

	cmd, err := tc.Command(ctx, args...)
	if err != nil {
		return nil, err
	}
	configMap := req.GetConfig()
	if configMap == nil {
		configMap = map[string]string{} // the SDK's set_all_config does not accept JSON null
	}
	config, err := json.Marshal(configMap)
	if err != nil {
		return nil, fmt.Errorf("failed to serialize configuration: %w", err)
	}
	secretKeys := req.GetConfigSecretKeys()
	if secretKeys == nil {
		secretKeys = []string{}
	}
	secretKeysJSON, err := json.Marshal(secretKeys)
	if err != nil {
		return nil, fmt.Errorf("failed to serialize configuration secret keys: %w", err)
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(env, "PULUMI_CONFIG="+string(config), "PULUMI_CONFIG_SECRET_KEYS="+string(secretKeysJSON))
	if req.GetPwd() != "" {
		cmd.Dir = req.GetPwd()
	}
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	logging.V(5).Infof("gcu language host launching: %v", cmd.Args)

	if err := cmd.Run(); err != nil {
		_ = os.Stdout.Sync()
		_ = os.Stderr.Sync()
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			code := -1
			if status, ok := exitErr.Sys().(syscall.WaitStatus); ok {
				code = status.ExitStatus()
			}
			switch code {
			case exitAfterUserMessage:
				return &pulumirpc.RunResponse{Bail: true}, nil
			case 0:
				return &pulumirpc.RunResponse{Error: fmt.Sprintf("program exited unexpectedly: %v", exitErr)}, nil
			default:
				return &pulumirpc.RunResponse{Error: fmt.Sprintf("program exited with non-zero exit code: %d", code)}, nil
			}
		}
		return &pulumirpc.RunResponse{
			Error: fmt.Sprintf("problem executing program (could not run language executor): %v", err),
		}, nil
	}
	return &pulumirpc.RunResponse{}, nil
}

// streamWriter forwards writes as InstallDependencies stream messages.
type streamWriter struct {
	mu     *sync.Mutex
	send   func(*pulumirpc.InstallDependenciesResponse) error
	stderr bool
}

func (w streamWriter) Write(p []byte) (int, error) {
	buf := append([]byte(nil), p...)
	msg := &pulumirpc.InstallDependenciesResponse{Stdout: buf}
	if w.stderr {
		msg = &pulumirpc.InstallDependenciesResponse{Stderr: buf}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.send(msg); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (h *host) InstallDependencies(req *pulumirpc.InstallDependenciesRequest,
	server pulumirpc.LanguageRuntime_InstallDependenciesServer,
) error {
	info := req.GetInfo()
	if info == nil {
		info = &pulumirpc.ProgramInfo{RootDirectory: req.GetDirectory(), ProgramDirectory: req.GetDirectory()}
	}
	tc, err := toolchainFor(info)
	if err != nil {
		return err
	}
	mu := &sync.Mutex{}
	stdout := streamWriter{mu: mu, send: server.Send}
	stderr := streamWriter{mu: mu, send: server.Send, stderr: true}
	cwd := info.GetProgramDirectory()
	if cwd == "" {
		cwd = info.GetRootDirectory()
	}
	return tc.InstallDependencies(server.Context(), cwd, req.GetUseLanguageVersionTools(), true, stdout, stderr)
}

func (h *host) RunPlugin(req *pulumirpc.RunPluginRequest, server pulumirpc.LanguageRuntime_RunPluginServer) error {
	info := req.GetInfo()
	tc, err := toolchainFor(info)
	if err != nil {
		return err
	}
	if err := tc.ValidateVenv(server.Context()); err != nil {
		return err
	}
	program := info.GetProgramDirectory()
	if ep := info.GetEntryPoint(); ep != "" && ep != "." {
		program = filepath.Join(program, ep)
	}
	if program == "" {
		program = req.GetProgram()
	}
	// `python <dir>` runs <dir>/__main__.py with <dir> on sys.path, which is how policy packs are laid out.
	args := append([]string{"-u", program}, req.GetArgs()...)
	cmd, err := tc.Command(server.Context(), args...)
	if err != nil {
		return err
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(env, req.GetEnv()...)
	if req.GetPwd() != "" {
		cmd.Dir = req.GetPwd()
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}

	var mu sync.Mutex
	send := func(msg *pulumirpc.RunPluginResponse) {
		mu.Lock()
		defer mu.Unlock()
		_ = server.Send(msg)
	}
	var wg sync.WaitGroup
	pump := func(r io.Reader, stderr bool) {
		defer wg.Done()
		buf := make([]byte, 32*1024)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				chunk := append([]byte(nil), buf[:n]...)
				if stderr {
					send(&pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Stderr{Stderr: chunk}})
				} else {
					send(&pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Stdout{Stdout: chunk}})
				}
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(2)
	go pump(outPipe, false)
	go pump(errPipe, true)
	wg.Wait()

	code := int32(0)
	if err := cmd.Wait(); err != nil {
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			return err
		}
		code = int32(exitErr.ExitCode())
	}
	send(&pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Exitcode{Exitcode: code}})
	return nil
}

func (h *host) About(ctx context.Context, req *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	tc, err := toolchainFor(req.GetInfo())
	if err != nil {
		return nil, err
	}
	about, err := tc.About(ctx)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.AboutResponse{
		Executable: about.PythonExecutable,
		Version:    about.PythonVersion.String(),
		Metadata:   map[string]string{"languageHost": "gcu-stack pulumi-language-python " + version},
	}, nil
}

func (h *host) GetProgramDependencies(ctx context.Context, req *pulumirpc.GetProgramDependenciesRequest,
) (*pulumirpc.GetProgramDependenciesResponse, error) {
	tc, err := toolchainFor(req.GetInfo())
	if err != nil {
		return nil, err
	}
	pkgs, err := tc.ListPackages(ctx, req.GetTransitiveDependencies())
	if err != nil {
		return nil, err
	}
	deps := make([]*pulumirpc.DependencyInfo, 0, len(pkgs))
	for _, p := range pkgs {
		deps = append(deps, &pulumirpc.DependencyInfo{Name: p.Name, Version: p.Version})
	}
	return &pulumirpc.GetProgramDependenciesResponse{Dependencies: deps}, nil
}
GO
}

# The host is built against the same pulumi sdk/v3 as the CLI (sdk v3.272.0 itself needs
# github.com/pulumi/pulumi-cloud-sdk/go@v1.20260918.0, which the proxy does not serve).
build_langhost() {
  local v="$1" t0 hash dir src tmp
  t0="$(now)"
  tmp="$(mktemp -d)"; write_langhost_source "$tmp"
  hash="$(sha256sum "$tmp/main.go" | cut -c1-10)"
  dir="$CACHE_DIR/pulumi-language-python-$v-$hash"
  LANGHOST_BIN="$dir/bin/pulumi-language-python"
  if [ -x "$LANGHOST_BIN" ]; then rm -rf "$tmp"; timing "pulumi-language-python" "$(elapsed "$t0")" cached; return; fi
  src="$dir/src"; mkdir -p "$src" "$dir/bin"
  mv "$tmp/main.go" "$src/main.go"; rm -rf "$tmp"
  printf 'module gcu-stack/tools/pulumi-language-python\n\ngo 1.25\n\nrequire github.com/pulumi/pulumi/sdk/v3 v%s\n' \
    "$v" > "$src/go.mod"
  (cd "$src" && go mod tidy >&2 && \
   go build -trimpath -o "$LANGHOST_BIN.tmp" -ldflags "-s -w -X main.version=$v-gcu-$hash" . >&2)
  mv "$LANGHOST_BIN.tmp" "$LANGHOST_BIN"
  timing "pulumi-language-python" "$(elapsed "$t0")" built
}

# ------------------------------------------------------------------------------------------------ SDK scripts
# pulumi-language-python-exec (runs the program) and pulumi-resource-pulumi-python (dynamic providers) ship in the
# sdk/v3 module (python/cmd, python/dist). They are taken from the pinned SDK version because they drive the
# installed Python SDK.
fetch_python_scripts() {
  local t0 v dir sdkdir
  t0="$(now)"
  for v in "$PULUMI_PIN" "$CLI_VERSION"; do
    dir="$CACHE_DIR/pulumi-python-scripts-$v"
    if [ -x "$dir/bin/pulumi-language-python-exec" ] && [ -x "$dir/bin/pulumi-resource-pulumi-python" ]; then
      SCRIPTS_DIR="$dir/bin"; timing "python SDK scripts v$v" "$(elapsed "$t0")" cached; return
    fi
  done
  for v in "$PULUMI_PIN" "$CLI_VERSION"; do
    if sdkdir="$(mod_download "github.com/pulumi/pulumi/sdk/v3@v$v")"; then
      dir="$CACHE_DIR/pulumi-python-scripts-$v"; mkdir -p "$dir/bin"
      install -m 0755 "$sdkdir/python/cmd/pulumi-language-python-exec" "$dir/bin/"
      install -m 0755 "$sdkdir/python/dist/pulumi-resource-pulumi-python" "$dir/bin/"
      SCRIPTS_DIR="$dir/bin"; timing "python SDK scripts v$v" "$(elapsed "$t0")" fetched; return
    fi
  done
  die "cannot download github.com/pulumi/pulumi/sdk/v3 (tried v$PULUMI_PIN v$CLI_VERSION)"
}

# ------------------------------------------------------------------------------------------------ providers
# resolve_provider_ref NAME PIN OVERRIDE FALLBACK REFS... -> "<module version> <stamp version> <exact|substitute>"
resolve_provider_ref() {
  local name="$1" pin="$2" override="$3" fallback="$4" entry
  shift 4
  if [ -n "$override" ]; then echo "$override $(pep440_to_semver "$pin") exact"; return; fi
  for entry in "$@"; do
    if [ "${entry%%=*}" = "$pin" ]; then echo "${entry#*=} $(pep440_to_semver "$pin") exact"; return; fi
  done
  if [ -n "$fallback" ] && [ "$STRICT" != 1 ]; then
    for entry in "$@"; do
      if [ "${entry%%=*}" = "$fallback" ]; then
        echo "${entry#*=} $(pep440_to_semver "$fallback") substitute"; return
      fi
    done
  fi
  return 1
}

# build_provider NAME MODULE MODVERSION STAMP VERSIONVAR -> sets PROVIDER_BIN; returns 2 if the module cannot be
# downloaded. Build errors are fatal. (Called from an `if`, where `set -e` is off, hence the explicit checks.)
build_provider() {
  local name="$1" module="$2" modver="$3" stamp="$4" versionvar="$5" t0 dir moddir src cmd r drops
  t0="$(now)"
  dir="$CACHE_DIR/pulumi-resource-$name-$stamp"
  PROVIDER_BIN="$dir/bin/pulumi-resource-$name"
  if [ -x "$PROVIDER_BIN" ]; then timing "pulumi-resource-$name $stamp" "$(elapsed "$t0")" cached; return 0; fi
  moddir="$(mod_download "$module@$modver")" || return 2
  src="$dir/src"
  rm -rf "$src" && mkdir -p "$dir/bin" && cp -r "$moddir" "$src" && chmod -R u+w "$src" || die "cannot copy $moddir"
  # Drop local (../sdk) replaces; the required version of that module then comes from the proxy.
  drops="$(cd "$src" && go mod edit -json | python3 -c '
import json, sys
for r in json.load(sys.stdin).get("Replace") or []:
    if r["New"]["Path"].startswith((".", "/")):
        print(r["Old"]["Path"] + ("@" + r["Old"]["Version"] if r["Old"].get("Version") else ""))')" \
    || die "cannot read $src/go.mod"
  for r in $drops; do
    (cd "$src" && go mod edit -dropreplace="$r") || die "go mod edit -dropreplace=$r failed"
  done
  cmd="$src/cmd/pulumi-resource-$name"
  if [ -f "$cmd/generate.go" ]; then   # kubernetes: produces the go:embed'ed schema-embed.json
    (cd "$cmd" && VERSION="$stamp" go run ./generate.go >&2) || die "$name: generate.go failed"
  fi
  (cd "$src" && go build -trimpath -o "$PROVIDER_BIN.tmp" -ldflags "-s -w -X $versionvar=$stamp" \
     "./cmd/pulumi-resource-$name" >&2) || die "building pulumi-resource-$name from $module@$modver failed"
  mv "$PROVIDER_BIN.tmp" "$PROVIDER_BIN" || die "mv failed"
  timing "pulumi-resource-$name $stamp" "$(elapsed "$t0")" built
}

# provider NAME PIN PLUGIN_VERSION MODULE VERSIONVAR OVERRIDE FALLBACK REFS...
# Records "NAME PLUGIN_VERSION BINARY SOURCE" lines in $CACHE_DIR/resolved/plugins-<pins> for install-plugins and
# status; SOURCE is "exact:MODULE@VERSION" or "substitute:MODULE@VERSION=STAMP".
PLUGIN_LINES=()
provider() {
  local name="$1" pin="$2" plugver="$3" module="$4" versionvar="$5" override="$6" fallback="$7" res modver stamp kind
  local srcver
  shift 7
  if ! res="$(resolve_provider_ref "$name" "$pin" "$override" "$fallback" "$@")"; then
    [ "$STRICT" = 1 ] && die "pulumi-resource-$name $pin: no source (set GCU_$(echo "$name" | tr a-z A-Z)_PROVIDER_REF)"
    warn "pulumi-resource-$name $pin: SKIPPED - $module has no version on the Go module proxy for this pin and no" \
         "substitute is known; resources of this provider cannot be previewed (set" \
         "GCU_$(echo "$name" | tr a-z A-Z)_PROVIDER_REF=<commit or pseudo-version> where a full proxy is reachable)."
    timing "pulumi-resource-$name $pin" 0.0 "SKIPPED (no source)"
    return 0
  fi
  read -r modver stamp kind <<<"$res"
  srcver="$stamp"
  if [ "$kind" = substitute ]; then
    # Reports the pinned version with the commit as semver build metadata: the engine (which warns when a plugin
    # reports a lower version than requested, as 4.25.0-alpha.N < 4.25.0 would be) sees the version it asked for,
    # and `pulumi plugin ls`/the provider's logs still show which commit it is.
    stamp="$plugver+${modver##*-}"
    warn "pulumi-resource-$name: pinned SDK $pin needs provider $plugver, whose source is not on the Go module" \
         "proxy; SUBSTITUTING $module@$modver (the source of upstream $srcver). It is installed as plugin version" \
         "$plugver (what the SDK requests) and reports $stamp."
  fi
  if ! build_provider "$name" "$module" "$modver" "$stamp" "$versionvar"; then
    [ "$STRICT" = 1 ] && die "cannot download $module@$modver"
    warn "pulumi-resource-$name: cannot download $module@$modver; SKIPPED"
    timing "pulumi-resource-$name $pin" 0.0 "SKIPPED (download failed)"
    return 0
  fi
  PLUGIN_LINES+=("$name $plugver $PROVIDER_BIN $kind:$module@$modver=$srcver")
}

# ------------------------------------------------------------------------------------------------ plugin install
plugins_manifest() { echo "$RESOLVED_DIR/plugins-k$KUBERNETES_PIN-d$DOCKER_PIN"; }

# install_plugins_official HOME: `pulumi plugin install resource NAME VERSION -f BINARY` for each built provider.
install_plugins_official() {
  local home="$1" t0 name ver bin inst
  t0="$(now)"
  while read -r name ver bin _; do
    [ -n "$name" ] || continue
    inst="$home/plugins/resource-$name-v$ver/pulumi-resource-$name"
    # Up to date if installed after the binary was built, with the same size (cmp of 300 MB costs ~1.5 s).
    if [ -x "$inst" ] && [ ! -e "$home/plugins/resource-$name-v$ver.partial" ] && [ ! "$bin" -nt "$inst" ] \
       && [ "$(stat -c %s "$bin")" = "$(stat -c %s "$inst")" ]; then
      continue
    fi
    PULUMI_HOME="$home" PULUMI_SKIP_UPDATE_CHECK=true "$BIN_DIR/pulumi" plugin install resource "$name" "$ver" \
      -f "$bin" --reinstall </dev/null >&2
  done < "$(plugins_manifest)"
  timing "plugin install ($home)" "$(elapsed "$t0")" done
}

# install_plugins_fast HOME: real plugin directories holding symlinks to the canonical installs (which were made by
# `pulumi plugin install` into the default PULUMI_HOME). The engine skips symlinked plugin *directories*.
install_plugins_fast() {
  local home="$1" canon="$DEFAULT_PULUMI_HOME/plugins" d base f
  [ -d "$canon" ] || die "nothing installed in $canon yet; run scripts/toolchain/pulumi.sh first"
  mkdir -p "$home/plugins"
  for d in "$canon"/resource-*-v*; do
    [ -d "$d" ] || continue
    base="$(basename "$d")"
    [ -e "$d.partial" ] && continue
    mkdir -p "$home/plugins/$base"
    for f in "$d"/* "$d"/.[!.]*; do
      [ -e "$f" ] || continue
      ln -sfn "$f" "$home/plugins/$base/$(basename "$f")"
    done
  done
}

# ------------------------------------------------------------------------------------------------ env
print_env() {
  local bin="$1" home="$2"
  cat <<EOF
export PATH="$bin:\$PATH"
export PULUMI_HOME="$home"
# no update-check / telemetry round trips (no internet here)
export PULUMI_SKIP_UPDATE_CHECK=true
# never try to download plugins from GitHub/get.pulumi.com: fail fast with "plugin ... not installed" instead
export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
# (PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK is not needed: the Automation API only requires CLI >= 3.1.0)
EOF
}

current_cli_version() {
  local rec="$RESOLVED_DIR/pulumi-cli-$PULUMI_PIN"
  [ -f "$rec" ] && [ -x "$CACHE_DIR/pulumi-$(cat "$rec")/bin/pulumi" ] || \
    die "toolchain not built yet for pulumi==$PULUMI_PIN; run $SELF"
  cat "$rec"
}

# ------------------------------------------------------------------------------------------------ detect
# The lowest CLI used as it is: the pinned SDK's own version. Pulumi releases the CLI and the SDK together, a CLI is
# compatible with SDKs up to its own version, and the Automation API (which the tests and bench use) asks for a CLI
# at least as new as the SDK.
PULUMI_MIN_CLI="${GCU_PULUMI_MIN_VERSION:-$PULUMI_PIN}"

plugin_listed() {   # plugin_listed CLI -> 0 if `pulumi plugin ls` has resource kubernetes $KUBERNETES_PLUGIN_VERSION
  PULUMI_SKIP_UPDATE_CHECK=true timeout 60 "$1" plugin ls --json </dev/null 2>/dev/null | python3 -c '
import json, sys
want = sys.argv[1]
try:
    plugins = json.load(sys.stdin) or []
except ValueError:
    sys.exit(1)
sys.exit(0 if any(p.get("name") == "kubernetes" and p.get("kind") == "resource" and p.get("version") == want
                  for p in plugins) else 1)' "$KUBERNETES_PLUGIN_VERSION"
}

detect() {
  local no_install=0 cli real v
  [ "${1:-}" = --no-install ] && no_install=1
  cli="$(command -v pulumi 2>/dev/null || true)"
  if [ -z "$cli" ]; then log "no pulumi on PATH"; return 1; fi
  real="$(readlink -f "$cli")"
  case "$real" in
    "$(mkdir -p "$CACHE_DIR" && cd "$CACHE_DIR" && pwd -P)"/*)
      log "the pulumi on PATH ($cli) is this toolchain's own build, not an installed CLI"; return 1 ;;
  esac
  v="$(PULUMI_SKIP_UPDATE_CHECK=true timeout 60 "$cli" version </dev/null 2>/dev/null | head -n1 | tr -d '[:space:]')"
  v="${v#v}"
  if [ -z "$v" ]; then log "'$cli version' failed"; return 1; fi
  if ! ver_ge "$v" "$PULUMI_MIN_CLI"; then
    log "the pulumi on PATH ($cli) is v$v, older than v$PULUMI_MIN_CLI (the pinned SDK's version, the minimum;" \
        "upgrade it, or set GCU_PULUMI_MIN_VERSION to try an older one)"
    return 1
  fi
  if plugin_listed "$cli"; then
    log "Pulumi: using the installed CLI $cli (v$v) and its kubernetes provider plugin $KUBERNETES_PLUGIN_VERSION"
    return 0
  fi
  if [ "$no_install" = 1 ]; then
    log "Pulumi: the installed CLI $cli (v$v) is usable; it has no kubernetes plugin $KUBERNETES_PLUGIN_VERSION yet," \
        "so 'pulumi plugin install resource kubernetes $KUBERNETES_PLUGIN_VERSION' would be tried first"
    return 0
  fi
  log "installing the kubernetes provider plugin $KUBERNETES_PLUGIN_VERSION with $cli"
  if timeout 300 "$cli" plugin install resource kubernetes "$KUBERNETES_PLUGIN_VERSION" </dev/null >&2 \
     && plugin_listed "$cli"; then
    log "Pulumi: using the installed CLI $cli (v$v) and the kubernetes provider plugin $KUBERNETES_PLUGIN_VERSION"
    return 0
  fi
  log "the installed CLI $cli (v$v) cannot get the kubernetes provider plugin $KUBERNETES_PLUGIN_VERSION"
  return 1
}

# ------------------------------------------------------------------------------------------------ main
cmd="${1:-build}"
case "$cmd" in
  env)
    CLI_VERSION="$(current_cli_version)"
    print_env "$CACHE_DIR/pulumi-$CLI_VERSION/bin" "${PULUMI_HOME:-$DEFAULT_PULUMI_HOME}"
    ;;
  install-plugins)
    home="${2:-${PULUMI_HOME:-$DEFAULT_PULUMI_HOME}}"
    mkdir -p "$home"; home="$(cd "$home" && pwd)"
    if [ "$home" = "$(mkdir -p "$DEFAULT_PULUMI_HOME" && cd "$DEFAULT_PULUMI_HOME" && pwd)" ]; then
      CLI_VERSION="$(current_cli_version)"; BIN_DIR="$CACHE_DIR/pulumi-$CLI_VERSION/bin"
      install_plugins_official "$home"
    else
      install_plugins_fast "$home"
    fi
    ;;
  detect)
    detect "${2:-}"
    ;;
  status)
    CLI_VERSION="$(current_cli_version)"
    echo "pins: pulumi==$PULUMI_PIN pulumi-kubernetes==$KUBERNETES_PIN pulumi-docker==$DOCKER_PIN"
    echo "CLI: v$CLI_VERSION"
    ls -la "$CACHE_DIR/pulumi-$CLI_VERSION/bin/"
    echo "plugins:"
    while read -r name ver bin src; do
      [ -n "$name" ] || continue
      case "$src" in
        substitute:*)
          src="${src#substitute:}"
          echo "  $name $ver: SUBSTITUTE - plugin $ver is NOT built from the pulumi-$name v$ver release: it is built from" \
               "${src%=*} (the source of upstream ${src##*=}), the nearest source the Go module proxy here serves," \
               "and installed under version $ver because the pinned SDK asks for that. Binary: $bin" ;;
        exact:*) src="${src#exact:}"; echo "  $name $ver: built from ${src%=*}. Binary: $bin" ;;
        *) echo "  $name $ver: $bin" ;;
      esac
    done < "$(plugins_manifest)" 2>/dev/null || true
    echo "PULUMI_HOME=${PULUMI_HOME:-$DEFAULT_PULUMI_HOME}:"
    PULUMI_HOME="${PULUMI_HOME:-$DEFAULT_PULUMI_HOME}" PULUMI_SKIP_UPDATE_CHECK=true \
      "$CACHE_DIR/pulumi-$CLI_VERSION/bin/pulumi" plugin ls 2>/dev/null || true
    ;;
  build)
    T_ALL="$(now)"
    mkdir -p "$CACHE_DIR" "$RESOLVED_DIR"
    go_env
    ensure_go
    log "pins from $REQUIREMENTS: pulumi==$PULUMI_PIN pulumi-kubernetes==$KUBERNETES_PIN pulumi-docker==$DOCKER_PIN"

    CLI_VERSION="$(resolve_cli_version)"
    if [ "$CLI_VERSION" != "$PULUMI_PIN" ]; then
      warn "github.com/pulumi/pulumi/pkg/v3@v$PULUMI_PIN is not on the Go module proxy; building the Pulumi CLI" \
           "v$CLI_VERSION instead (pulumi version prints v$CLI_VERSION; the Python SDK stays $PULUMI_PIN)."
    fi
    build_cli "$CLI_VERSION"
    build_langhost "$CLI_VERSION"
    fetch_python_scripts

    # One PATH dir with real files: the CLI looks for bundled plugins next to its (symlink-resolved) executable.
    BIN_DIR="$CACHE_DIR/pulumi-$CLI_VERSION/bin"
    for f in "$LANGHOST_BIN" "$SCRIPTS_DIR/pulumi-language-python-exec" "$SCRIPTS_DIR/pulumi-resource-pulumi-python"; do
      cmp -s "$f" "$BIN_DIR/$(basename "$f")" || install -m 0755 "$f" "$BIN_DIR/$(basename "$f")"
    done

    provider kubernetes "$KUBERNETES_PIN" "$KUBERNETES_PLUGIN_VERSION" github.com/pulumi/pulumi-kubernetes/provider/v4 \
      github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version \
      "${GCU_KUBERNETES_PROVIDER_REF:-}" "$KUBERNETES_PROVIDER_FALLBACK" "${KUBERNETES_PROVIDER_REFS[@]}"
    provider docker "$DOCKER_PIN" "$DOCKER_PLUGIN_VERSION" github.com/pulumi/pulumi-docker/provider/v4 \
      github.com/pulumi/pulumi-docker/provider/v4/pkg/version.Version \
      "${GCU_DOCKER_PROVIDER_REF:-}" "$DOCKER_PROVIDER_FALLBACK" ${DOCKER_PROVIDER_REFS[@]+"${DOCKER_PROVIDER_REFS[@]}"}
    printf '%s\n' ${PLUGIN_LINES[@]+"${PLUGIN_LINES[@]}"} > "$(plugins_manifest)"

    home="${PULUMI_HOME:-$DEFAULT_PULUMI_HOME}"
    mkdir -p "$DEFAULT_PULUMI_HOME" "$home"
    install_plugins_official "$DEFAULT_PULUMI_HOME"
    if [ "$(cd "$home" && pwd)" != "$(cd "$DEFAULT_PULUMI_HOME" && pwd)" ]; then
      t0="$(now)"; install_plugins_fast "$home"; timing "plugin links ($home)" "$(elapsed "$t0")" done
    fi

    timing "total" "$(elapsed "$T_ALL")" ""
    print_timings
    print_env "$BIN_DIR" "$home"
    ;;
  -h|--help|help)
    sed -n '2,/^set -euo/p' "$SELF" | sed -e '$d' -e 's/^# \{0,1\}//'
    ;;
  *)
    die "unknown command '$cmd' (build | env | install-plugins [PULUMI_HOME] | status | detect [--no-install])"
    ;;
esac

# Shared by kube.sh and pulumi.sh (sourced, not run): find a Go toolchain new enough for a build, or fetch one.
#
#   go_pick MIN            prints the path of a `go` whose version is >= MIN: $GO, the `go` on PATH, /usr/local/go,
#                          or one fetched earlier into $GCU_CACHE_DIR/go/sdk; prints nothing if there is none.
#   go_fetch               fetches go$GO_DOWNLOAD_VERSION (the golang.org/toolchain module from the Go module proxy,
#                          checked against the checksum database as `go` itself does) and prints its path.
#   go_version_of GO       e.g. 1.26.8
#   go_mod_go_line FILE    the `go` line of a go.mod, e.g. 1.24.0
#   ver_ge A B             A >= B (version sort)
#
# Debian bookworm's golang-go (1.19) is too old for every build here and too old to switch toolchains by itself.

GO_DOWNLOAD_VERSION="${GO_DOWNLOAD_VERSION:-1.26.8}"

ver_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

go_version_of() { GOTOOLCHAIN=local "$1" env GOVERSION 2>/dev/null | sed 's/^go//'; }

go_mod_go_line() { sed -n 's/^go \([0-9.]*\).*/\1/p' "$1" | head -n1; }

go_pick() {
  local min="$1" cache="${GCU_CACHE_DIR:-$HOME/.cache/gcu-stack}" cand v
  for cand in "${GO:-}" "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go \
              "$cache/go/sdk/go$GO_DOWNLOAD_VERSION/bin/go"; do
    [ -n "$cand" ] && [ -x "$cand" ] || continue
    v="$(go_version_of "$cand")"
    if [ -n "$v" ] && ver_ge "$v" "$min"; then echo "$cand"; return 0; fi
  done
  return 0
}

go_fetch() {
  local cache="${GCU_CACHE_DIR:-$HOME/.cache/gcu-stack}" arch mod url dest tmp
  case "$(uname -m)" in x86_64) arch=amd64 ;; aarch64|arm64) arch=arm64 ;;
    *) echo "go.sh: unsupported architecture $(uname -m)" >&2; return 1 ;; esac
  mod="golang.org/toolchain@v0.0.1-go$GO_DOWNLOAD_VERSION.linux-$arch"
  url="${GOPROXY:-https://proxy.golang.org}"; url="${url%%,*}"
  [ "$url" != direct ] && [ "$url" != off ] || url=https://proxy.golang.org
  dest="$cache/go/sdk/go$GO_DOWNLOAD_VERSION"
  if [ -x "$dest/bin/go" ]; then echo "$dest/bin/go"; return 0; fi
  command -v curl >/dev/null && command -v unzip >/dev/null \
    || { echo "go.sh: fetching Go needs curl and unzip (apt-get install curl unzip)" >&2; return 1; }
  tmp="$(mktemp -d)"
  echo "go.sh: no suitable go found; fetching $mod from $url" >&2
  curl -fsSL -o "$tmp/go.zip" "$url/golang.org/toolchain/@v/v0.0.1-go$GO_DOWNLOAD_VERSION.linux-$arch.zip" \
    || { rm -rf "$tmp"; echo "go.sh: download of $mod failed" >&2; return 1; }
  curl -fsSL -o "$tmp/lookup" "$url/sumdb/sum.golang.org/lookup/$mod" || : > "$tmp/lookup"
  python3 - "$tmp/go.zip" "$tmp/lookup" "${mod%@*}" "${mod#*@}" <<'PY' || { rm -rf "$tmp"; return 1; }
import base64, hashlib, sys, zipfile
zpath, lookup, mod, ver = sys.argv[1:]
want = [l.split()[2] for l in open(lookup) if l.startswith(f"{mod} {ver} h1:")]
with zipfile.ZipFile(zpath) as z:
    names = sorted(z.namelist())
    summary = "".join(f"{hashlib.sha256(z.read(n)).hexdigest()}  {n}\n" for n in names)
got = "h1:" + base64.b64encode(hashlib.sha256(summary.encode()).digest()).decode()
if not want:
    sys.exit(f"go.sh: cannot verify {mod}@{ver}: no checksum database entry")
if got != want[0]:
    sys.exit(f"go.sh: checksum mismatch for {mod}@{ver}: {got} != {want[0]}")
PY
  mkdir -p "$tmp/x" "$(dirname "$dest")"
  (cd "$tmp/x" && unzip -q ../go.zip) || { rm -rf "$tmp"; return 1; }
  rm -rf "$dest"
  mv "$tmp/x/$mod" "$dest"
  rm -rf "$tmp"
  echo "$dest/bin/go"
}

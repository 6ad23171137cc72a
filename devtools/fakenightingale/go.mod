// The gcu-stack stand-ins for Nightingale's parts (see main.go). Built by devtools/fakenightingale/__init__.py;
// go.sum is committed (GONOSUMDB=k8s.io,sigs.k8s.io).
module gcu-stack/devtools/fakenightingale

go 1.24.0

require sigs.k8s.io/yaml v1.4.0

// Command gcushare-scheduler-extender (gcu-stack stand-in): a kube-scheduler extender for GCU-share,
// speaking the scheduler's HTTP extender protocol (k8s.io/kube-scheduler/extender/v1).
//
// It stands in for Enflame's extender in the image the tests build, so the stack's
// extender Deployment and Service run it unchanged (`--port` comes from the Deployment's
// args) and kube-scheduler reaches it with the KubeSchedulerConfiguration the stack
// exports (filter and bind verbs, nodeCacheCapable: node names only).
//
//   - filter: a pod's GCU memory (--resource-name) must fit on one GCU. A node's GCUs are
//     GFD's enflame.com/gcu.count label (1 without it), each with allocatable / count; what
//     pods bound here took is read from their gcu-index annotations. A node passes when one
//     GCU has enough free; every other node is failed with the numbers, which the scheduler
//     puts in the pod's FailedScheduling event. (The scheduler itself only checks the node's
//     total: two half-full GCUs pass it for a pod that fits on neither.)
//   - bind: picks the fullest GCU the pod fits on, annotates the pod (the GCU, who bound it)
//     and creates its Binding through the API server, with the Deployment's ServiceAccount.
//
// Each request is logged on one line, which the tests read.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// Version is printed by --version.
const Version = "0.1.0-gcu-stack-standin"

// BoundByAnnotation names the extender instance that bound a pod (its value: "<hostname> -> <node>").
const BoundByAnnotation = "gcushare.enflame.com/bound-by"

// maxBody bounds a request body: the scheduler sends one pod and node names.
const maxBody = 4 << 20

// Extender answers the scheduler's filter and bind calls.
type Extender struct {
	Client   kubernetes.Interface
	Resource corev1.ResourceName
	Identity string // who binds (the pod's hostname), written into BoundByAnnotation
	Log      *log.Logger
}

// asks is what a pod asks for of the resource: the sum over its containers (limits, else requests; for an extended
// resource they are equal) or the largest init container's, whichever is larger.
func (e *Extender) asks(pod *corev1.Pod) int64 {
	one := func(c corev1.Container) int64 {
		if q, ok := c.Resources.Limits[e.Resource]; ok {
			return q.Value()
		}
		if q, ok := c.Resources.Requests[e.Resource]; ok {
			return q.Value()
		}
		return 0
	}
	var sum, init int64
	for _, c := range pod.Spec.Containers {
		sum += one(c)
	}
	for _, c := range pod.Spec.InitContainers {
		if v := one(c); v > init {
			init = v
		}
	}
	if init > sum {
		return init
	}
	return sum
}

// GcuCountLabel is GFD's label with the node's number of GCUs: each GCU has allocatable / count of the memory.
const GcuCountLabel = "enflame.com/gcu.count"

// GcuIndexAnnotation records which GCU of its node a bound pod's memory is on.
const GcuIndexAnnotation = "gcushare.enflame.com/gcu-index"

// nodeMemory is what a node has of the resource: per GCU, and what the pods on it (other than `except`, not
// finished) take from each. A pod bound without an index (not through this extender) takes from the node only.
type nodeMemory struct {
	allocatable, perGcu, unplaced int64
	used                          []int64
}

func (m nodeMemory) free() int64 {
	var used int64 = m.unplaced
	for _, u := range m.used {
		used += u
	}
	return m.allocatable - used
}

// best is the GCU the pod goes to: the fullest one it still fits on (bin packing keeps whole GCUs free), or -1.
func (m nodeMemory) best(want int64) int {
	chosen := -1
	for i, u := range m.used {
		if left := m.perGcu - u; left >= want && (chosen < 0 || left < m.perGcu-m.used[chosen]) {
			chosen = i
		}
	}
	if want > m.free() {
		return -1
	}
	return chosen
}

func (m nodeMemory) mostFree() (int, int64) {
	index, most := 0, int64(-1)
	for i, u := range m.used {
		if m.perGcu-u > most {
			index, most = i, m.perGcu-u
		}
	}
	return index, most
}

func (e *Extender) memory(ctx context.Context, node string, except types.UID) (*nodeMemory, error) {
	n, err := e.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	m := &nodeMemory{}
	if q, ok := n.Status.Allocatable[e.Resource]; ok {
		m.allocatable = q.Value()
	}
	count := 1
	if v, err := strconv.Atoi(n.Labels[GcuCountLabel]); err == nil && v > 0 {
		count = v
	}
	m.perGcu, m.used = m.allocatable/int64(count), make([]int64, count)
	pods, err := e.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		// (the field selector already chose them; checked again for clients that ignore it, like the fake one)
		if p.Spec.NodeName != node || p.UID == except || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		asks := e.asks(p)
		if index, err := strconv.Atoi(p.Annotations[GcuIndexAnnotation]); err == nil && index >= 0 && index < count {
			m.used[index] += asks
		} else {
			m.unplaced += asks
		}
	}
	return m, nil
}

// Filter keeps the nodes where one GCU has enough free memory for the pod.
func (e *Extender) Filter(ctx context.Context, args *extenderv1.ExtenderArgs) *extenderv1.ExtenderFilterResult {
	if args.Pod == nil || args.NodeNames == nil {
		return &extenderv1.ExtenderFilterResult{Error: "filter: the extender is nodeCacheCapable: send Pod and NodeNames"}
	}
	want := e.asks(args.Pod)
	fits, failed := []string{}, extenderv1.FailedNodesMap{}
	for _, node := range *args.NodeNames {
		m, err := e.memory(ctx, node, args.Pod.UID)
		switch {
		case err != nil:
			failed[node] = fmt.Sprintf("gcushare: cannot read node %s: %v", node, err)
		case m.best(want) >= 0:
			fits = append(fits, node)
		default:
			index, most := m.mostFree()
			failed[node] = fmt.Sprintf("gcushare: asks %d %s on one GCU, the most %s has free is %d of %d (GCU %d; %d free on the node)",
				want, e.Resource, node, most, m.perGcu, index, m.free())
		}
	}
	e.Log.Printf("filter %s/%s asks %d %s: fits %v, fails %s", args.Pod.Namespace, args.Pod.Name, want, e.Resource,
		fits, describe(failed))
	return &extenderv1.ExtenderFilterResult{NodeNames: &fits, FailedNodes: failed}
}

// Bind picks the pod's GCU, records it and who bound the pod in its annotations, and binds it to the node.
func (e *Extender) Bind(ctx context.Context, args *extenderv1.ExtenderBindingArgs) *extenderv1.ExtenderBindingResult {
	fail := func(what string, err error) *extenderv1.ExtenderBindingResult {
		e.Log.Printf("bind %s/%s -> %s: %s: %v", args.PodNamespace, args.PodName, args.Node, what, err)
		return &extenderv1.ExtenderBindingResult{Error: fmt.Sprintf("%s: %v", what, err)}
	}
	if args.PodName == "" || args.PodNamespace == "" || args.Node == "" {
		return &extenderv1.ExtenderBindingResult{Error: "bind: PodName, PodNamespace and Node are required"}
	}
	pods := e.Client.CoreV1().Pods(args.PodNamespace)
	pod, err := pods.Get(ctx, args.PodName, metav1.GetOptions{})
	if err != nil {
		return fail("reading the pod", err)
	}
	m, err := e.memory(ctx, args.Node, pod.UID)
	if err != nil {
		return fail("reading the node", err)
	}
	want := e.asks(pod)
	index := m.best(want)
	if index < 0 {
		return fail("no GCU fits", fmt.Errorf("asks %d, the node has %d free", want, m.free()))
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		BoundByAnnotation: e.Identity + " -> " + args.Node, GcuIndexAnnotation: strconv.Itoa(index)}}})
	if _, err := pods.Patch(ctx, args.PodName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fail("annotating", err)
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: args.PodName, Namespace: args.PodNamespace, UID: args.PodUID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: args.Node},
	}
	if err := pods.Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fail("binding", err)
	}
	e.Log.Printf("bind %s/%s -> %s: bound, %d %s on GCU %d", args.PodNamespace, args.PodName, args.Node, want, e.Resource, index)
	return &extenderv1.ExtenderBindingResult{}
}

func describe(failed extenderv1.FailedNodesMap) string {
	keys := make([]string, 0, len(failed))
	for k := range failed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+": "+failed[k])
	}
	return "{" + strings.Join(parts, "; ") + "}"
}

// Handler serves <prefix>/filter and <prefix>/bind (the verbs of the exported configuration) and /healthz.
func (e *Extender) Handler(prefix string) http.Handler {
	mux := http.NewServeMux()
	serve := func(verb string, call func(context.Context, []byte) (any, error)) {
		mux.HandleFunc(prefix+"/"+verb, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				http.Error(w, verb+": POST only", http.StatusMethodNotAllowed)
				return
			}
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
			if err != nil {
				http.Error(w, verb+": "+err.Error(), http.StatusRequestEntityTooLarge)
				return
			}
			answer, err := call(r.Context(), body)
			if err != nil {
				http.Error(w, verb+": "+err.Error(), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(answer)
		})
	}
	serve("filter", func(ctx context.Context, body []byte) (any, error) {
		var args extenderv1.ExtenderArgs
		if err := json.Unmarshal(body, &args); err != nil {
			return nil, err
		}
		return e.Filter(ctx, &args), nil
	})
	serve("bind", func(ctx context.Context, body []byte) (any, error) {
		var args extenderv1.ExtenderBindingArgs
		if err := json.Unmarshal(body, &args); err != nil {
			return nil, err
		}
		return e.Bind(ctx, &args), nil
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return mux
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gcushare-scheduler-extender", flag.ContinueOnError)
	port := fs.Int("port", 32766, "port to listen on (all addresses)")
	prefix := fs.String("path-prefix", "/gcushare-scheduler", "the path of the scheduler configuration's urlPrefix")
	resource := fs.String("resource-name", "enflame.com/gcu-memory", "the GCU-share extended resource")
	kubeconfig := fs.String("kubeconfig", "", "a kubeconfig (default: the pod's ServiceAccount)")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version {
		fmt.Fprintln(stdout, Version)
		return nil
	}
	var cfg *rest.Config
	var err error
	if *kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("no API server: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	ext := &Extender{Client: client, Resource: corev1.ResourceName(*resource), Identity: host, Log: logger}
	server := &http.Server{Addr: fmt.Sprintf(":%d", *port), Handler: ext.Handler(strings.TrimRight(*prefix, "/")),
		ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}()
	logger.Printf("gcushare-scheduler-extender %s: %s on :%d%s/{filter,bind}", Version, *resource, *port, *prefix)
	if err := server.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "gcushare-scheduler-extender:", err)
		os.Exit(1)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

const res = corev1.ResourceName("enflame.com/gcu-memory")

func node(name string, memory string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{res: resource.MustParse(memory)}}}
}

func pod(name, nodeName string, memory string, phase corev1.PodPhase) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: k8stypes.UID("uid-" + name)},
		Spec:   corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "main"}}},
		Status: corev1.PodStatus{Phase: phase}}
	if memory != "" {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{res: resource.MustParse(memory)}
	}
	return p
}

func post(t *testing.T, server *httptest.Server, path string, body any, answer any) int {
	t.Helper()
	data, _ := json.Marshal(body)
	resp, err := http.Post(server.URL+path, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if answer != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, answer); err != nil {
			t.Fatalf("%s: %v: %s", path, err, raw)
		}
	}
	return resp.StatusCode
}

func TestFilterWantsOneGcuWithRoomAndBindPacksTheFullestThatFits(t *testing.T) {
	a := node("a", "32")
	a.Labels = map[string]string{GcuCountLabel: "2"} // two GCUs of 16
	running := pod("running", "a", "10", corev1.PodRunning)
	running.Annotations = map[string]string{GcuIndexAnnotation: "0"}
	client := fake.NewSimpleClientset(a, node("b", "16"), node("c", "0"), running,
		pod("done", "b", "16", corev1.PodSucceeded), pod("small", "", "6", corev1.PodPending))
	var logged bytes.Buffer
	ext := &Extender{Client: client, Resource: res, Identity: "extender-1", Log: log.New(&logged, "", 0)}
	server := httptest.NewServer(ext.Handler("/gcushare-scheduler"))
	defer server.Close()

	names := []string{"a", "b", "c"}
	var result extenderv1.ExtenderFilterResult
	if code := post(t, server, "/gcushare-scheduler/filter", extenderv1.ExtenderArgs{Pod: pod("big", "", "20", ""), NodeNames: &names}, &result); code != 200 {
		t.Fatalf("filter: HTTP %d", code)
	}
	// a has 22 free in all (the scheduler's own check passes) but at most 16 on one GCU.
	if result.NodeNames == nil || len(*result.NodeNames) != 0 {
		t.Fatalf("20 fits on no single GCU: %+v", result)
	}
	if got := result.FailedNodes["a"]; got != "gcushare: asks 20 enflame.com/gcu-memory on one GCU, the most a has free is 16 of 16 (GCU 1; 22 free on the node)" {
		t.Fatalf("a's reason: %q", got)
	}
	if !strings.Contains(result.FailedNodes["b"], "the most b has free is 16 of 16") {
		t.Fatalf("b's finished pod takes nothing: %q", result.FailedNodes["b"])
	}

	if post(t, server, "/gcushare-scheduler/filter", extenderv1.ExtenderArgs{Pod: pod("mid", "", "8", ""), NodeNames: &names}, &result); strings.Join(*result.NodeNames, ",") != "a,b" {
		t.Fatalf("8 fits on a's GCU 1 and on b: %+v", result)
	}
	if !strings.Contains(logged.String(), "filter default/mid asks 8 enflame.com/gcu-memory: fits [a b], fails {c: gcushare: asks 8") {
		t.Fatalf("log: %s", logged.String())
	}

	var bound extenderv1.ExtenderBindingResult
	if code := post(t, server, "/gcushare-scheduler/bind", extenderv1.ExtenderBindingArgs{PodName: "small", PodNamespace: "default", PodUID: "uid-small", Node: "a"}, &bound); code != 200 || bound.Error != "" {
		t.Fatalf("bind: HTTP %d %+v", code, bound)
	}
	var verbs []string
	for _, a := range client.Actions() {
		verbs = append(verbs, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
	}
	if !strings.Contains(strings.Join(verbs, ","), "patch pods/,create pods/binding") {
		t.Fatalf("bind should annotate, then create the binding: %v", verbs)
	}
	annotated, _ := client.CoreV1().Pods("default").Get(t.Context(), "small", metav1.GetOptions{})
	// 6 fits on GCU 0 (6 free) and GCU 1 (16 free): the fuller one, keeping GCU 1 whole.
	if annotated.Annotations[BoundByAnnotation] != "extender-1 -> a" || annotated.Annotations[GcuIndexAnnotation] != "0" {
		t.Fatalf("annotations: %v", annotated.Annotations)
	}
	if !strings.Contains(logged.String(), "bind default/small -> a: bound, 6 enflame.com/gcu-memory on GCU 0") {
		t.Fatalf("log: %s", logged.String())
	}
}

func TestBadRequestsAreRefusedWithAReason(t *testing.T) {
	ext := &Extender{Client: fake.NewSimpleClientset(), Resource: res, Identity: "x", Log: log.New(io.Discard, "", 0)}
	server := httptest.NewServer(ext.Handler("/gcushare-scheduler"))
	defer server.Close()
	resp, err := http.Post(server.URL+"/gcushare-scheduler/filter", "application/json", strings.NewReader("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("malformed body: HTTP %d", resp.StatusCode)
	}
	var result extenderv1.ExtenderFilterResult
	post(t, server, "/gcushare-scheduler/filter", extenderv1.ExtenderArgs{}, &result)
	if !strings.Contains(result.Error, "nodeCacheCapable") {
		t.Fatalf("no pod or node names: %+v", result)
	}
	resp, err = http.Get(server.URL + "/gcushare-scheduler/bind")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET bind: HTTP %d", resp.StatusCode)
	}
}

package kubernetes

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestCoreV1Requests: the core-only client asks the API server what
// client-go's generated one asks (paths, options as the query) and reads its
// answers, its errors included, with a scheme that knows core/v1 alone.
func TestCoreV1Requests(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/ns/pods":
			_ = json.NewEncoder(w).Encode(corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
				Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}}})
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/ns/persistentvolumeclaims/gone":
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound,
				Message: `persistentvolumeclaims "gone" not found`})
		case r.Method == http.MethodPost && r.URL.Path == "/api/v1/namespaces/ns/pods":
			var p corev1.Pod
			_ = json.NewDecoder(r.Body).Decode(&p)
			p.UID = "uid-1"
			_ = json.NewEncoder(w).Encode(p)
		default:
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	defer srv.Close()
	core, err := newCoreV1(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	pods, err := core.Pods("ns").List(ctx, metav1.ListOptions{LabelSelector: "dev.sandboxer.managed=true"})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Name != "p1" || pods.Items[0].Status.Phase != corev1.PodRunning {
		t.Fatalf("list pods: %+v, %v", pods, err)
	}
	created, err := core.Pods("ns").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p2"}}, metav1.CreateOptions{})
	if err != nil || created.Name != "p2" || created.UID != "uid-1" {
		t.Fatalf("create pod: %+v, %v", created, err)
	}
	_, err = core.PersistentVolumeClaims("ns").Get(ctx, "gone", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("get a missing claim: %v, want not found", err)
	}
	limit := int64(4096)
	logURL := core.Pods("ns").GetLogs("p1", &corev1.PodLogOptions{Container: containerName, Follow: true, LimitBytes: &limit}).URL()
	if logURL.Path != "/api/v1/namespaces/ns/pods/p1/log" || logURL.Query().Get("container") != containerName ||
		logURL.Query().Get("follow") != "true" || logURL.Query().Get("limitBytes") != "4096" {
		t.Errorf("log request: %s", logURL)
	}
	execURL := core.RESTClient().Post().Namespace("ns").Resource("pods").Name("p1").SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: containerName, Command: []string{"id", "-u"}, Stdout: true}, paramCodec).URL()
	if q := execURL.Query(); execURL.Path != "/api/v1/namespaces/ns/pods/p1/exec" || strings.Join(q["command"], " ") != "id -u" || q.Get("stdout") != "true" {
		t.Errorf("exec request: %s", execURL)
	}
	if len(got) < 1 || !strings.Contains(got[0], "labelSelector=dev.sandboxer.managed%3Dtrue") {
		t.Errorf("the list's selector did not reach the server: %q", got)
	}
}

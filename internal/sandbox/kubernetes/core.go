package kubernetes

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
)

// coreV1 is the part of the Kubernetes API the runtime uses: pods, their logs,
// attach and exec, persistent volume claims, events, nodes and resource quotas, all in the core
// group. It is client-go's generic typed client over a REST client whose scheme
// knows that group only. The generated clientset (kubernetes.NewForConfig)
// registers every API group; compiling those was about a quarter of the
// server's cold build (docs/operations.md), for calls that never leave core/v1.
type coreV1 struct {
	client rest.Interface
}

var (
	coreScheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		if err := corev1.AddToScheme(s); err != nil {
			panic(err) // a fixed set of types: fails only if client-go changes its registration
		}
		return s
	}()
	coreCodecs = serializer.NewCodecFactory(coreScheme)
	// paramCodec encodes the *Options of a request (list, get, log, attach, exec) as its query.
	paramCodec = runtime.NewParameterCodec(coreScheme)
)

// newCoreV1 is the client for rc, set up as client-go's typed core/v1 client is.
func newCoreV1(rc *rest.Config) (coreV1, error) {
	cfg := *rc
	gv := corev1.SchemeGroupVersion
	cfg.GroupVersion = &gv
	cfg.APIPath = "/api"
	cfg.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(coreScheme, coreCodecs).WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(&cfg)
	if err != nil {
		return coreV1{}, fmt.Errorf("kubernetes client for %s: %w", rc.Host, err)
	}
	return coreV1{client: client}, nil
}

// RESTClient is the REST client itself, for subresources (attach, exec) and raw paths.
func (c coreV1) RESTClient() rest.Interface { return c.client }

// Pods are the pods of namespace ns.
func (c coreV1) Pods(ns string) pods {
	return pods{gentype.NewClientWithList[*corev1.Pod, *corev1.PodList]("pods", c.client, paramCodec, ns,
		func() *corev1.Pod { return &corev1.Pod{} }, func() *corev1.PodList { return &corev1.PodList{} })}
}

// PersistentVolumeClaims are the claims of namespace ns.
func (c coreV1) PersistentVolumeClaims(ns string) *gentype.ClientWithList[*corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimList] {
	return gentype.NewClientWithList[*corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimList]("persistentvolumeclaims", c.client, paramCodec, ns,
		func() *corev1.PersistentVolumeClaim { return &corev1.PersistentVolumeClaim{} },
		func() *corev1.PersistentVolumeClaimList { return &corev1.PersistentVolumeClaimList{} })
}

// Events are the events of namespace ns.
func (c coreV1) Events(ns string) *gentype.ClientWithList[*corev1.Event, *corev1.EventList] {
	return gentype.NewClientWithList[*corev1.Event, *corev1.EventList]("events", c.client, paramCodec, ns,
		func() *corev1.Event { return &corev1.Event{} }, func() *corev1.EventList { return &corev1.EventList{} })
}

// Nodes are the cluster's nodes (not namespaced).
func (c coreV1) Nodes() *gentype.ClientWithList[*corev1.Node, *corev1.NodeList] {
	return gentype.NewClientWithList[*corev1.Node, *corev1.NodeList]("nodes", c.client, paramCodec, "",
		func() *corev1.Node { return &corev1.Node{} }, func() *corev1.NodeList { return &corev1.NodeList{} })
}

// pods adds a pod's log to the generic client, as client-go's typed pods client does.
type pods struct {
	*gentype.ClientWithList[*corev1.Pod, *corev1.PodList]
}

// GetLogs is the request for the log of pod name's container in opts.
func (p pods) GetLogs(name string, opts *corev1.PodLogOptions) *rest.Request {
	return p.GetClient().Get().Namespace(p.GetNamespace()).Name(name).Resource("pods").SubResource("log").VersionedParams(opts, paramCodec)
}

// ResourceQuotas are the quotas of namespace ns.
func (c coreV1) ResourceQuotas(ns string) *gentype.ClientWithList[*corev1.ResourceQuota, *corev1.ResourceQuotaList] {
	return gentype.NewClientWithList[*corev1.ResourceQuota, *corev1.ResourceQuotaList]("resourcequotas", c.client, paramCodec, ns,
		func() *corev1.ResourceQuota { return &corev1.ResourceQuota{} }, func() *corev1.ResourceQuotaList { return &corev1.ResourceQuotaList{} })
}

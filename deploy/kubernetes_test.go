package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/worker"
)

// strictDecoder decodes the API kinds the manifests use with the Kubernetes types
// themselves; strict mode turns unknown and duplicate fields into errors, so a
// misspelled field fails here instead of being silently dropped by the cluster.
var strictDecoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: true, Strict: true})
}()

// decodeManifests decodes every document of a multi-document YAML file.
func decodeManifests(data []byte) ([]runtime.Object, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := strictDecoder.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		objs = append(objs, obj)
	}
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}

// workload is a pod template with the name of what owns it.
type workload struct {
	where    string
	labels   map[string]string
	template corev1.PodSpec
}

// checkKubernetes checks what the API types cannot: that each container is given
// exactly the configuration its process reads and needs, that its ports are the
// ones that process listens on, and that selectors, probes and Services line up.
func checkKubernetes(objs []runtime.Object) []error {
	var errs []error
	configMaps := map[string]map[string]string{}
	var workloads []workload
	var services []*corev1.Service
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			configMaps[o.Name] = o.Data
		case *appsv1.Deployment:
			where := "Deployment " + o.Name
			if o.Spec.Selector == nil {
				errs = append(errs, fmt.Errorf("%s: no selector", where))
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(o.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(o.Spec.Template.Labels)) {
				errs = append(errs, fmt.Errorf("%s: the selector %v does not select its own pods %v", where, o.Spec.Selector, o.Spec.Template.Labels))
			}
			workloads = append(workloads, workload{where, o.Spec.Template.Labels, o.Spec.Template.Spec})
			errs = append(errs, checkGracePeriod(where, o.Spec.Template.Spec)...)
		case *batchv1.Job:
			workloads = append(workloads, workload{"Job " + o.Name, o.Spec.Template.Labels, o.Spec.Template.Spec})
		case *corev1.Service:
			services = append(services, o)
		default:
			errs = append(errs, fmt.Errorf("%T: not a kind these checks know; add its checks", obj))
		}
	}
	for _, w := range workloads {
		// The namespace an init container running `mailyard temporal setup`
		// prepares before the pod's processes start.
		setUp := ""
		for _, c := range w.template.InitContainers {
			cfg, cerrs := checkContainer(w.where+" init container "+c.Name, c, configMaps)
			errs = append(errs, cerrs...)
			if cfg != nil && c.Args[0] == "temporal" {
				setUp = temporalNamespace(cfg)
			}
		}
		for _, c := range w.template.Containers {
			cfg, cerrs := checkContainer(w.where+" container "+c.Name, c, configMaps)
			errs = append(errs, cerrs...)
			if cfg != nil && slices.Contains(startsWorkflows, c.Args[0]) && temporalNamespace(cfg) != setUp {
				errs = append(errs, fmt.Errorf("%s container %s: no init container runs mailyard temporal setup for %s; Temporal refuses workflow starts until the search attributes exist", w.where, c.Name, temporalNamespace(cfg)))
			}
		}
	}
	for _, s := range services {
		errs = append(errs, checkService(s, workloads)...)
	}
	return errs
}

// temporalNamespace names the namespace a process uses, with its server.
func temporalNamespace(cfg *config.Config) string {
	return cfg.TemporalNamespace + " at " + cfg.TemporalAddress
}

// checkContainer checks one container and returns the configuration its process
// loads (nil if it does not load).
func checkContainer(where string, c corev1.Container, configMaps map[string]map[string]string) (*config.Config, []error) {
	var errs []error
	if len(c.Command) > 0 {
		errs = append(errs, fmt.Errorf("%s: command replaces the image's mailyard entrypoint; use args", where))
	}
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			data, ok := configMaps[from.ConfigMapRef.Name]
			if !ok {
				errs = append(errs, fmt.Errorf("%s: ConfigMap %q is not in the manifests", where, from.ConfigMapRef.Name))
			}
			for k, v := range data {
				env[from.Prefix+k] = v
			}
		case from.SecretRef != nil:
			errs = append(errs, fmt.Errorf("%s: envFrom a whole Secret hides which variables the process gets; name each with env[].valueFrom.secretKeyRef", where))
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			if e.ValueFrom.SecretKeyRef.Key != e.Name {
				errs = append(errs, fmt.Errorf("%s: %s comes from Secret key %q; keep key and variable name equal, as the documented kubectl command creates them", where, e.Name, e.ValueFrom.SecretKeyRef.Key))
			}
			env[e.Name] = secretSamples[e.Name]
			if env[e.Name] == "" {
				env[e.Name] = "sample"
			}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			v, ok := configMaps[e.ValueFrom.ConfigMapKeyRef.Name][e.ValueFrom.ConfigMapKeyRef.Key]
			if !ok {
				errs = append(errs, fmt.Errorf("%s: %s refers to a ConfigMap key that is not in the manifests", where, e.Name))
			}
			env[e.Name] = v
		}
	}
	cfg, perrs := checkProcess(where, c.Args, env)
	errs = append(errs, perrs...)
	if cfg == nil {
		return nil, errs
	}

	// The ports a container declares are the ones its process listens on.
	listens := map[string]string{}
	switch c.Args[0] {
	case "api":
		listens = map[string]string{"http": port(cfg.HTTPAddr), "internal": port(cfg.InternalAddr)}
	case "dns":
		listens = map[string]string{"dns-udp": port(cfg.DNSAddr), "dns-tcp": port(cfg.DNSAddr)}
	case "inbound":
		listens = map[string]string{"smtp": port(cfg.InboundAddr)}
	case "submission":
		listens = map[string]string{"submission": port(cfg.Submission.Addr)}
		if cfg.Submission.TLSAddr != "" {
			listens["submissions"] = port(cfg.Submission.TLSAddr)
		}
	}
	if cfg.MetricsAddr != "" && (c.Args[0] == "worker" || c.Args[0] == "dns" || c.Args[0] == "inbound" || c.Args[0] == "submission") {
		listens["metrics"] = port(cfg.MetricsAddr)
	}
	for _, p := range c.Ports {
		want, ok := listens[p.Name]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: port %q is not one mailyard %s listens on (%v)", where, p.Name, c.Args[0], listens))
		} else if strconv.Itoa(int(p.ContainerPort)) != want {
			errs = append(errs, fmt.Errorf("%s: port %q is %d but the process listens on %s", where, p.Name, p.ContainerPort, want))
		}
	}
	if c.Args[0] == "dns" && (!hasProtocol(c.Ports, corev1.ProtocolUDP) || !hasProtocol(c.Ports, corev1.ProtocolTCP)) {
		errs = append(errs, fmt.Errorf("%s: DNS needs both a UDP and a TCP port", where))
	}
	for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if probe != nil && probe.HTTPGet != nil && findPort(c.Ports, probe.HTTPGet.Port, corev1.ProtocolTCP) == nil {
			errs = append(errs, fmt.Errorf("%s: probe %s uses port %s, which the container does not declare", where, probe.HTTPGet.Path, probe.HTTPGet.Port.String()))
		}
	}
	return cfg, errs
}

// checkGracePeriod: a pod running `mailyard worker` is given more time to stop
// than its longest attempt (worker.StopTimeout), or Kubernetes kills it in the
// middle of an SMTP session or webhook POST.
func checkGracePeriod(where string, spec corev1.PodSpec) []error {
	for _, c := range spec.Containers {
		if len(c.Args) == 0 || c.Args[0] != "worker" {
			continue
		}
		grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
		if spec.TerminationGracePeriodSeconds != nil {
			grace = *spec.TerminationGracePeriodSeconds
		}
		if time.Duration(grace)*time.Second <= worker.StopTimeout {
			return []error{fmt.Errorf("%s: terminationGracePeriodSeconds is %d, but mailyard worker may take %s to stop (worker.StopTimeout)", where, grace, worker.StopTimeout)}
		}
	}
	return nil
}

func hasProtocol(ports []corev1.ContainerPort, proto corev1.Protocol) bool {
	for _, p := range ports {
		if protocolOf(p.Protocol) == proto {
			return true
		}
	}
	return false
}

func protocolOf(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

func findPort(ports []corev1.ContainerPort, target intstr.IntOrString, proto corev1.Protocol) *corev1.ContainerPort {
	for i, p := range ports {
		if protocolOf(p.Protocol) != protocolOf(proto) {
			continue
		}
		if (target.Type == intstr.String && p.Name == target.StrVal) || (target.Type == intstr.Int && p.ContainerPort == target.IntVal) {
			return &ports[i]
		}
	}
	return nil
}

// checkService: the selector picks exactly one workload's pods, and each target
// port is one those pods declare, with the same protocol.
func checkService(s *corev1.Service, workloads []workload) []error {
	where := "Service " + s.Name
	var selected []workload
	for _, w := range workloads {
		if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.labels)) {
			selected = append(selected, w)
		}
	}
	if len(selected) != 1 {
		return []error{fmt.Errorf("%s: the selector %v matches %d workloads, want 1", where, s.Spec.Selector, len(selected))}
	}
	var errs []error
	for _, sp := range s.Spec.Ports {
		target := sp.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(sp.Port)
		}
		found := false
		for _, c := range selected[0].template.Containers {
			found = found || findPort(c.Ports, target, sp.Protocol) != nil
		}
		if !found {
			errs = append(errs, fmt.Errorf("%s: port %q targets %s/%s, which %s does not declare", where, sp.Name, target.String(), protocolOf(sp.Protocol), selected[0].where))
		}
	}
	return errs
}

func TestKubernetesManifests(t *testing.T) {
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var all []runtime.Object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeManifests(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		all = append(all, objs...)
	}
	for _, err := range checkKubernetes(all) {
		t.Error(err)
	}
	// Every process of the product is deployed.
	deployed := map[string]bool{}
	for _, obj := range all {
		var spec corev1.PodSpec
		switch o := obj.(type) {
		case *appsv1.Deployment:
			spec = o.Spec.Template.Spec
		case *batchv1.Job:
			spec = o.Spec.Template.Spec
		}
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			deployed[strings.Join(c.Args, " ")] = true
		}
	}
	for _, want := range []string{"api", "worker", "dns", "inbound", "submission", "migrate up", "temporal setup"} {
		if !deployed[want] {
			t.Errorf("no container runs mailyard %s", want)
		}
	}
}

// The checks fail on broken manifests: a misspelled field, a wrong type, a variable
// the binary does not read, a missing required secret, a port the process does not
// listen on, a Service pointing nowhere.
func TestKubernetesChecksCatchMistakes(t *testing.T) {
	const deployment = `apiVersion: apps/v1
kind: Deployment
metadata: { name: mailyard-api }
spec:
  %s
  selector: { matchLabels: { app: mailyard-api } }
  template:
    metadata: { labels: { app: mailyard-api } }
    spec:
      initContainers:
        - { name: temporal-setup, image: mailyard:latest, args: ["temporal", "setup"] }
      containers:
        - name: api
          image: mailyard:latest
          args: ["api"]
          env:
            - { name: MAILYARD_DATABASE_URL, valueFrom: { secretKeyRef: { name: mailyard, key: MAILYARD_DATABASE_URL } } }
            - { name: MAILYARD_ENCRYPTION_KEY, valueFrom: { secretKeyRef: { name: mailyard, key: MAILYARD_ENCRYPTION_KEY } } }
            %s
            - { name: MAILYARD_HTTP_ADDR, value: "0.0.0.0:8080" }
          ports: [{ name: http, containerPort: %s }]
---
apiVersion: v1
kind: Service
metadata: { name: mailyard-api }
spec:
  selector: { app: mailyard-api }
  ports: [{ name: http, port: 80, targetPort: %s }]
`
	const token = `- { name: MAILYARD_INTERNAL_TOKEN, valueFrom: { secretKeyRef: { name: mailyard, key: MAILYARD_INTERNAL_TOKEN } } }`
	good := fmt.Sprintf(deployment, "replicas: 2", token, "8080", "http")
	objs, err := decodeManifests([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if errs := checkKubernetes(objs); len(errs) > 0 {
		t.Fatalf("the good example fails: %v", errs)
	}

	for name, doc := range map[string]string{
		"misspelled field": fmt.Sprintf(deployment, "replica: 2", token, "8080", "http"),
		"wrong type":       fmt.Sprintf(deployment, `replicas: "two"`, token, "8080", "http"),
		"duplicate field":  fmt.Sprintf(deployment, "replicas: 2\n  replicas: 3", token, "8080", "http"),
	} {
		if _, err := decodeManifests([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}

	for name, c := range map[string]struct{ doc, want string }{
		"unknown variable": {fmt.Sprintf(deployment, "replicas: 2", token+"\n            - { name: MAILYARD_HTTP_PORT, value: \"8080\" }", "8080", "http"),
			"MAILYARD_HTTP_PORT is not a variable mailyard reads"},
		"missing secret": {fmt.Sprintf(deployment, "replicas: 2", "", "8080", "http"),
			"MAILYARD_INTERNAL_TOKEN is required by mailyard api"},
		"wrong port":    {fmt.Sprintf(deployment, "replicas: 2", token, "9090", "http"), `port "http" is 9090 but the process listens on 8080`},
		"dangling port": {fmt.Sprintf(deployment, "replicas: 2", token, "8080", "web"), `port "http" targets web/TCP`},
		"no setup": {strings.Replace(good, `args: ["temporal", "setup"]`, `args: ["migrate", "up"]`, 1),
			"no init container runs mailyard temporal setup for default at localhost:7233"},
		"bad setup": {strings.Replace(good, `args: ["temporal", "setup"]`, `args: ["temporal", "set-up"]`, 1),
			`the Temporal step runs ["temporal" "set-up"], want temporal setup`},
	} {
		objs, err := decodeManifests([]byte(c.doc))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		errs := checkKubernetes(objs)
		if !strings.Contains(fmt.Sprint(errs), c.want) {
			t.Errorf("%s: %v, want %q", name, errs, c.want)
		}
	}
}

// The grace period check fails on the shipped manifests with the old 60 s.
func TestKubernetesWorkerGracePeriodCheck(t *testing.T) {
	data, err := os.ReadFile("kubernetes/mailyard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const shipped = "terminationGracePeriodSeconds: 960"
	if !bytes.Contains(data, []byte(shipped)) {
		t.Fatalf("%q is not in the manifests any more; update this test", shipped)
	}
	objs, err := decodeManifests(bytes.Replace(data, []byte(shipped), []byte("terminationGracePeriodSeconds: 60"), 1))
	if err != nil {
		t.Fatal(err)
	}
	if errs := checkKubernetes(objs); !strings.Contains(fmt.Sprint(errs), "terminationGracePeriodSeconds is 60, but mailyard worker may take 15m15s to stop") {
		t.Errorf("a 60 s grace period passes: %v", errs)
	}
}

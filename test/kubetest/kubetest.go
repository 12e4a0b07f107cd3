// Package kubetest runs a real Kubernetes control plane for tests: etcd and
// kube-apiserver on loopback ports, with RBAC authorization, static token
// users and the egressflow CRDs from deploy/crds installed.
//
// The binaries are built from the Go module proxy by
// test/tools/build-binaries.sh (pinned by the go.mod files under test/tools)
// and cached outside the repo; Launch builds them on first use. Once built, a
// control plane is ready in about a second.
//
// Identities: Admin is in system:masters. Agent and Controller are the
// service accounts the deploy/ manifests run the node agent and the cluster
// component as, so the RBAC rules in deploy/ can be tested with their clients.
package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// SystemNamespace is where egressflow runs in deploy/ and where its service
// accounts (and so the Agent and Controller identities) live.
const SystemNamespace = "egressflow-system"

// User is a static-token identity of the test API server.
type User struct {
	Name   string
	Token  string
	Groups []string
}

var (
	// Admin can do anything (group system:masters).
	Admin = User{Name: "admin", Token: "admin-token", Groups: []string{"system:masters"}}
	// Agent is the node agent's service account.
	Agent = serviceAccount("egressflow-agent", "agent-token")
	// Controller is the cluster component's service account.
	Controller = serviceAccount("egressflow-controller", "controller-token")
	// MetricsScraper is the ServiceAccount deploy/monitoring's PodMonitors
	// scrape with (scraper-rbac.yaml binds it to egressflow-metrics-reader).
	MetricsScraper = serviceAccount("egressflow-metrics-scraper", "metrics-scraper-token")
	// Stranger is an authenticated user whom nothing is granted.
	Stranger = User{Name: "stranger", Token: "stranger-token", Groups: []string{"system:authenticated"}}
)

func serviceAccount(name, token string) User {
	return User{
		Name:   "system:serviceaccount:" + SystemNamespace + ":" + name,
		Token:  token,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + SystemNamespace, "system:authenticated"},
	}
}

// readyTimeout bounds the wait for etcd, kube-apiserver and the CRDs; they
// take about a second together, the rest is slack for a loaded CI machine.
const readyTimeout = 60 * time.Second

// Cluster is a running etcd and kube-apiserver.
type Cluster struct {
	// Dir holds the data, certificates, token file, kubeconfig and logs.
	Dir string
	// URL is the API server's https address.
	URL string
	// Kubeconfig is a kubeconfig file for the admin user (for kubectl).
	Kubeconfig string
	// EtcdURL is etcd's plain-HTTP client address (its /metrics too).
	EtcdURL string

	caData []byte
	procs  []*process
	once   sync.Once
}

type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start launches a control plane for the test and stops it when the test
// ends. It fails the test if anything is missing or does not come up.
func Start(t testing.TB) *Cluster {
	t.Helper()
	c, err := Launch()
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubetest: kube-apiserver log tail:\n%s", c.logTail("kube-apiserver"))
		}
		c.Stop()
	})
	return c
}

// Options shape a control plane. The zero value is what Launch starts: an
// API server on loopback for tests of the API surface, with egressflow's
// CRDs and namespace already there.
type Options struct {
	// Address is where the API server listens and what it advertises
	// (default 127.0.0.1); its serving certificate names it.
	Address string
	// Users are static-token identities besides Admin, Agent and
	// Controller (the token file is read only at start).
	Users []User
	// Cluster makes the control plane of a real cluster, whose kubelets
	// join it: the Node authorizer and NodeRestriction and ServiceAccount
	// admission are on, kube-controller-manager and kube-scheduler run
	// beside the API server (as KubeControllerManager and KubeScheduler),
	// and nothing of egressflow is installed (kubectl apply -k does that).
	Cluster bool
	// ServiceCIDRs are the ClusterIP ranges (default 10.96.0.0/16 and
	// fd00:10:96::/112: dual-stack, so a Service may have both families).
	ServiceCIDRs string
}

// Identities of a real cluster's control-plane components, which the
// default RBAC policy binds to their roles.
var (
	KubeControllerManager = User{Name: "system:kube-controller-manager", Token: "kcm-token"}
	KubeScheduler         = User{Name: "system:kube-scheduler", Token: "scheduler-token"}
	KubeProxy             = User{Name: "system:kube-proxy", Token: "kube-proxy-token"}
)

// NodeUser is the identity of node's kubelet, which the Node authorizer
// recognises by its name and group.
func NodeUser(node string) User {
	return User{Name: "system:node:" + node, Token: "node-token-" + node, Groups: []string{"system:nodes", "system:authenticated"}}
}

// Launch starts a control plane that lives until Stop; use it from TestMain
// to share one API server among a package's tests.
func Launch() (*Cluster, error) { return LaunchWith(Options{}) }

// LaunchWith starts a control plane shaped by opts.
func LaunchWith(opts Options) (c *Cluster, err error) {
	if opts.Address == "" {
		opts.Address = "127.0.0.1"
	}
	if opts.ServiceCIDRs == "" {
		opts.ServiceCIDRs = "10.96.0.0/16,fd00:10:96::/112"
	}
	var buildArgs []string
	if opts.Cluster {
		buildArgs = append(buildArgs, "--with-cluster")
	}
	bins, err := binaries(buildArgs...)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		c, err = launch(opts, bins)
		// The ports are chosen free, then bound by etcd and the API
		// server a moment later: another test process may take one
		// meanwhile. Fresh ports then.
		if err == nil || attempt == portAttempts || !strings.Contains(err.Error(), "address already in use") {
			return c, err
		}
	}
}

// portAttempts is how many times LaunchWith chooses ports when one was
// taken before etcd or the API server bound it.
const portAttempts = 3

// launch starts etcd and the API server once, on ports chosen now.
func launch(opts Options, bins map[string]string) (c *Cluster, err error) {
	dir, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{Dir: dir}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, c.logTail("kube-apiserver"))
			c.Stop()
			c = nil
		}
	}()

	etcdClient, etcdPeer, apiPort, err := freePorts()
	if err != nil {
		return c, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	c.EtcdURL = etcdURL
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	if err := c.start("etcd", bins["etcd"],
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		// Test data is thrown away: skipping fsync makes writes fast.
		"--unsafe-no-fsync", "--log-level=error"); err != nil {
		return c, err
	}

	saKey := filepath.Join(dir, "sa.key")
	if err := writeServiceAccountKey(saKey); err != nil {
		return c, err
	}
	tokens := filepath.Join(dir, "tokens.csv")
	users := append([]User{Admin, Agent, Controller, MetricsScraper, Stranger}, opts.Users...)
	if opts.Cluster {
		users = append(users, KubeControllerManager, KubeScheduler, KubeProxy)
	}
	if err := writeTokenFile(tokens, users...); err != nil {
		return c, err
	}
	certDir := filepath.Join(dir, "certs")
	apiArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + opts.Address, "--advertise-address=" + opts.Address,
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + certDir,
		"--token-auth-file=" + tokens,
		// Unauthenticated requests get 401, as the API reference documents,
		// instead of being let in as system:anonymous.
		"--anonymous-auth=false",
		"--service-account-key-file=" + saKey,
		"--service-account-signing-key-file=" + saKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=" + opts.ServiceCIDRs,
		"--v=1",
	}
	if opts.Cluster {
		apiArgs = append(apiArgs,
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			// Kubelets are reached by their addresses (logs, exec):
			// nothing resolves node names here.
			"--kubelet-preferred-address-types=InternalIP,Hostname")
	} else {
		apiArgs = append(apiArgs,
			"--authorization-mode=RBAC",
			// No kube-controller-manager runs, so nothing would create the
			// default ServiceAccount that this admission plugin waits for.
			"--disable-admission-plugins=ServiceAccount",
			// Priority and fairness would queue the benchmarks' request
			// bursts and adds start-up work; a test API server has one
			// tenant.
			"--enable-priority-and-fairness=false")
	}
	if err := c.start("kube-apiserver", bins["kube-apiserver"], apiArgs...); err != nil {
		return c, err
	}
	c.URL = "https://" + net.JoinHostPort(opts.Address, strconv.Itoa(apiPort))

	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	poll := func(ctx context.Context, ready func() error) error {
		return poll(ctx, func() error {
			if p := c.exited(); p != "" {
				return backoffStop{fmt.Errorf("%s exited: %s", p, c.logTail(p))}
			}
			return ready()
		})
	}
	// The serving certificate is self-signed and written at startup. It is
	// read again on every attempt: a read that races the write sees a
	// partial bundle (the serving certificate without its CA), which must
	// cost one attempt, not the whole wait.
	var client kubernetes.Interface
	if err := poll(ctx, func() error {
		data, err := os.ReadFile(filepath.Join(certDir, "apiserver.crt"))
		if err != nil {
			return fmt.Errorf("no serving certificate yet: %w", err)
		}
		if client == nil || !bytes.Equal(data, c.caData) {
			c.caData = data
			client = kubernetes.NewForConfigOrDie(c.Config(Admin))
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%v: %s", err, body)
		}
		return nil
	}); err != nil {
		return c, fmt.Errorf("kube-apiserver not ready: %w", err)
	}
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := c.WriteKubeconfig(c.Kubeconfig, Admin); err != nil {
		return c, err
	}
	if opts.Cluster {
		return c, c.startControllers(bins, saKey, filepath.Join(certDir, "apiserver.crt"), opts.ServiceCIDRs)
	}
	if err := c.installCRDs(ctx); err != nil {
		return c, err
	}
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: SystemNamespace}}, metav1.CreateOptions{})
	return c, err
}

// startControllers runs kube-controller-manager and kube-scheduler, each
// as its own identity. Every controller of kube-controller-manager acts as
// its own service account (--use-service-account-credentials), as kubeadm
// sets it up; the root CA it publishes in every namespace is what pods
// verify the API server with.
func (c *Cluster) startControllers(bins map[string]string, saKey, rootCA, serviceCIDRs string) error {
	kcm, scheduler := filepath.Join(c.Dir, "kcm.kubeconfig"), filepath.Join(c.Dir, "scheduler.kubeconfig")
	if err := c.WriteKubeconfig(kcm, KubeControllerManager); err != nil {
		return err
	}
	if err := c.WriteKubeconfig(scheduler, KubeScheduler); err != nil {
		return err
	}
	if err := c.start("kube-controller-manager", bins["kube-controller-manager"],
		"--kubeconfig="+kcm, "--authentication-kubeconfig="+kcm, "--authorization-kubeconfig="+kcm,
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+saKey, "--root-ca-file="+rootCA,
		"--service-cluster-ip-range="+serviceCIDRs,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0", "--v=1"); err != nil {
		return err
	}
	return c.start("kube-scheduler", bins["kube-scheduler"],
		"--kubeconfig="+scheduler, "--authentication-kubeconfig="+scheduler, "--authorization-kubeconfig="+scheduler,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0", "--v=1")
}

// CAData is the API server's (self-signed) certificate, which clients
// verify it with.
func (c *Cluster) CAData() []byte { return c.caData }

// Config returns a client configuration that authenticates as user. Its rate
// limits are raised so that tests are not slowed by client-side throttling.
func (c *Cluster) Config(user User) *rest.Config {
	return &rest.Config{
		Host:            c.URL,
		BearerToken:     user.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.caData},
		QPS:             1000,
		Burst:           2000,
	}
}

// Stop kills kube-apiserver and etcd by pid, waits for them, and removes the
// directory. Their data is thrown away, so there is nothing to shut down
// gracefully. It is safe to call more than once.
func (c *Cluster) Stop() {
	c.once.Do(func() {
		for i := len(c.procs) - 1; i >= 0; i-- {
			_ = c.procs[i].cmd.Process.Kill()
			<-c.procs[i].done
		}
		_ = os.RemoveAll(c.Dir)
	})
}

// Pids returns the process ids of etcd and kube-apiserver.
func (c *Cluster) Pids() []int {
	var pids []int
	for _, p := range c.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	return pids
}

func (c *Cluster) start(name, bin string, args ...string) error {
	out, err := os.Create(filepath.Join(c.Dir, name+".stderr"))
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	// Dies with the test binary even if it is killed before cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	for i, old := range c.procs {
		if old.name == name { // a restart
			c.procs[i] = p
			return nil
		}
	}
	c.procs = append(c.procs, p)
	return nil
}

// StopAPIServer kills kube-apiserver (by pid) and waits for it to exit:
// an API server that is down. Every client gets connection refused until
// StartAPIServer; etcd keeps the data.
func (c *Cluster) StopAPIServer() {
	for _, p := range c.procs {
		if p.name == "kube-apiserver" {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, with the
// same arguments, and waits until it is ready.
func (c *Cluster) StartAPIServer() error {
	for _, p := range c.procs {
		if p.name == "kube-apiserver" {
			if err := c.start(p.name, p.cmd.Path, p.cmd.Args[1:]...); err != nil {
				return err
			}
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	client := kubernetes.NewForConfigOrDie(c.Config(Admin))
	return poll(ctx, func() error {
		_, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

// CRDFiles are the CRD manifests in root's deploy/crds (make manifests):
// every YAML file there but the kustomization that lists them.
func CRDFiles(root string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(root, "deploy", "crds", "*.yaml"))
	return slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == "kustomization.yaml" }), err
}

// installCRDs creates every CRD in deploy/crds and waits until each is
// Established, so that tests can use the new resources at once.
func (c *Cluster) installCRDs(ctx context.Context) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	files, err := CRDFiles(root)
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s/deploy/crds (run make manifests): %v", root, err)
	}
	dyn, err := dynamic.NewForConfig(c.Config(Admin))
	if err != nil {
		return err
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(&obj.Object); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if _, err := crds.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create CRD from %s: %w", f, err)
		}
		if err := poll(ctx, func() error {
			got, err := crds.Get(ctx, obj.GetName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, cond := range conditions {
				m, _ := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
			return fmt.Errorf("CRD %s not established", obj.GetName())
		}); err != nil {
			return err
		}
	}
	return nil
}

// WriteKubeconfig writes a kubeconfig file at path for user, as a
// component's binary reads it with --kubeconfig.
func (c *Cluster) WriteKubeconfig(path string, user User) error {
	return c.WriteKubeconfigVia(path, user, c.URL)
}

// WriteKubeconfigVia is WriteKubeconfig for a client that reaches the API
// server at another URL (through a forwarder; the address must stay
// 127.0.0.1, which the server's certificate names).
func (c *Cluster) WriteKubeconfigVia(path string, user User, server string) error {
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: kubetest
  context: {cluster: kubetest, user: %s}
current-context: kubetest
`, server, base64.StdEncoding.EncodeToString(c.caData), user.Name, user.Token, user.Name)
	return os.WriteFile(path, []byte(kubeconfig), 0o600)
}

// logTail returns the end of a process's output, for failure messages.
func (c *Cluster) logTail(name string) string {
	data, _ := os.ReadFile(filepath.Join(c.Dir, name+".stderr"))
	if len(data) > 4096 {
		data = data[len(data)-4096:]
	}
	return string(data)
}

// binaries builds (once, then from the cache) and locates etcd and
// kube-apiserver, and what args ask for, through
// test/tools/build-binaries.sh.
func binaries(args ...string) (map[string]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("bash", append([]string{filepath.Join(root, "test", "tools", "build-binaries.sh")}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("test/tools/build-binaries.sh: %w", err)
	}
	bins := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if name, path, ok := strings.Cut(line, "="); ok {
			bins[name] = path
		}
	}
	for _, want := range []string{"etcd", "kube-apiserver"} {
		if bins[want] == "" {
			return nil, fmt.Errorf("build-binaries.sh did not report %s", want)
		}
	}
	return bins, nil
}

// RepoRoot finds the egressflow module root above the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/egressflow/egressflow\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kubetest: not inside the egressflow repository")
		}
		dir = parent
	}
}

// freePorts asks the kernel for three free loopback ports.
func freePorts() (int, int, int, error) {
	var ports [3]int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, 0, 0, err
		}
		listeners = append(listeners, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports[0], ports[1], ports[2], nil
}

func writeServiceAccountKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	block := &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}
	return os.WriteFile(path, pem.EncodeToMemory(block), 0o600)
}

// writeTokenFile writes kube-apiserver's static token file:
// token,user,uid,"group1,group2".
func writeTokenFile(path string, users ...User) error {
	var b strings.Builder
	for _, u := range users {
		fmt.Fprintf(&b, "%s,%s,%s,%q\n", u.Token, u.Name, u.Name, strings.Join(u.Groups, ","))
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// exited names a process that has stopped, or returns "".
func (c *Cluster) exited() string {
	for _, p := range c.procs {
		select {
		case <-p.done:
			return p.name
		default:
		}
	}
	return ""
}

// backoffStop is an error after which poll gives up at once.
type backoffStop struct{ error }

// poll calls f until it succeeds, returns a backoffStop, or ctx ends.
func poll(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		if stop, ok := err.(backoffStop); ok {
			return stop.error
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Apply server-side applies every object of a multi-document YAML file and
// returns once the RBAC bindings among them are in effect.
func Apply(t testing.TB, cfg *rest.Config, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	dyn := dynamic.NewForConfigOrDie(cfg)
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var applied []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, gvk, err)
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if ns := obj.GetNamespace(); ns != "" {
			r = dyn.Resource(m.Resource).Namespace(ns)
		}
		if _, err := r.Apply(context.Background(), obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "kubetest", Force: true}); err != nil {
			t.Fatalf("%s: apply %s %s: %v", path, gvk.Kind, obj.GetName(), err)
		}
		applied = append(applied, obj)
	}
	if err := waitBindingsEffective(context.Background(), kubernetes.NewForConfigOrDie(cfg), applied); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// Binary builds (once, then from the cache) and locates one of the
// binaries test/tools/build-binaries.sh reports (helm, or kubectl with
// --with-kubectl among args): a test fails rather than skips without it.
func Binary(name string, args ...string) (string, error) {
	bins, err := binaries(args...)
	if err != nil {
		return "", err
	}
	if bins[name] == "" {
		return "", fmt.Errorf("build-binaries.sh did not report %s", name)
	}
	return bins[name], nil
}

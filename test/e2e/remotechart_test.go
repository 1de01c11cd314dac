package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gitops-fleet/fleet/dev/devenv"
	"github.com/gitops-fleet/fleet/gitops/charts/chartstest"
)

// testRemoteChart: a fleet.yaml naming a chart of a Helm repository (a
// real HTTP server in this test process, `helm repo index`'s layout, the
// archive packaged by the Helm SDK) becomes a Bundle with `fleet apply`,
// which fetches the chart and embeds it as Fleet's fleet apply does; the
// Bundle, applied with kubectl, deploys the chart on every target cluster
// with the fleet.yaml's values. No fleet component fetched anything: the
// controller renders the embedded copy.
func testRemoteChart(t *testing.T, targets []target) {
	archive := chartstest.Archive(t, "e2e-remote", "0.3.1",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-{{ .Chart.Name }}\ndata:\n  chartVersion: {{ .Chart.Version | quote }}\n  greeting: {{ .Values.greeting | quote }}\n",
		"greeting: from-chart\n", nil)
	sum := sha256.Sum256(archive)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	url := "http://" + l.Addr().String()
	index := repo.NewIndexFile()
	must(t, index.MustAdd(&chart.Metadata{APIVersion: chart.APIVersionV2, Name: "e2e-remote", Version: "0.3.1"}, "e2e-remote-0.3.1.tgz", url+"/charts", hex.EncodeToString(sum[:])))
	indexYAML, err := yaml.Marshal(index)
	must(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc("/index.yaml", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(indexYAML) })
	mux.HandleFunc("/charts/e2e-remote-0.3.1.tgz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(archive) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	root := tempDir(t)
	must(t, os.MkdirAll(filepath.Join(root, "app"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "app", "fleet.yaml"), []byte("defaultNamespace: e2e-remote\nhelm:\n  releaseName: web\n  repo: "+url+"\n  chart: e2e-remote\n  version: ~0.3.0\n  values:\n    greeting: from-fleet-yaml\n"), 0o600))
	targetsFile := filepath.Join(root, "targets.yaml")
	must(t, os.WriteFile(targetsFile, []byte("targets:\n- clusterSelector:\n    matchLabels:\n      env: dev\n"), 0o600))
	bundleFile := filepath.Join(tempDir(t), "bundle.yaml")
	out, err := bin(t, "fleet", "apply", "-o", bundleFile, "--root", root, "-n", ws, "--targets-file", targetsFile, "e2e-remote", "app")
	if err != nil {
		t.Fatalf("fleet apply: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bundleFile)
	must(t, err)
	if !strings.Contains(string(data), "/e2e-remote/Chart.yaml") {
		t.Fatalf("the Bundle has no embedded chart:\n%.2000s", data)
	}
	removeBundles(t, "e2e-remote-app")
	kubectlApply(t, bundleFile)
	must(t, devenv.BundleReady(t.Context(), up, ws, "e2e-remote-app", len(targets), 3*time.Minute))
	for _, tg := range targets {
		cm, err := clientset(t, tg.dev).CoreV1().ConfigMaps("e2e-remote").Get(t.Context(), "web-e2e-remote", metav1.GetOptions{})
		must(t, err)
		if want := map[string]string{"chartVersion": "0.3.1", "greeting": "from-fleet-yaml"}; !maps.Equal(cm.Data, want) {
			t.Errorf("%s: ConfigMap web-e2e-remote holds %v, want %v", tg.dev, cm.Data, want)
		}
	}
}

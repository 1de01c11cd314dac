// Package review says what a change to the registration objects in git does
// to each cluster, offline (`fleet diff`): it builds both sides as a GitOps
// tool would (a kustomization, or plain YAML), renders every Cluster's agent
// with the controller's own renderer and configuration, and compares
// manifests, the controller's redeploy decision, the agent's pod template
// and which Bundles target each cluster.
package review

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/strictyaml"
)

// DefaultWorkspace is the namespace of an object that names none, as the
// controller's examples and `fleet render` assume.
const DefaultWorkspace = "fleet-default"

// Tree is the registration objects of one side of a change.
type Tree struct {
	// Source names the side (a directory, or a git ref and path).
	Source   string
	Clusters map[string]*fleet.Cluster // "<ws>/<name>"
	Tokens   map[string]*fleet.ClusterRegistrationToken
	Bundles  map[string]*fleet.Bundle
	// Groups are the ClusterGroups by workspace.
	Groups map[string][]fleet.ClusterGroup
	// Secrets are the Secrets, by "<ns>/<name>" (kubeconfig Secrets are
	// read for the server they name, never shown).
	Secrets map[string]*corev1.Secret
	// Encrypted are the Secrets encrypted with SOPS (a top-level sops
	// key): their content is not read, so the server they name is unknown.
	Encrypted map[string]bool
	// Config is the controller configuration (defaults when none is found).
	Config *config.Config
	// ConfigFrom says where Config came from.
	ConfigFrom string
}

// Load reads the registration objects of dir: the output of a kustomize
// build when dir holds a kustomization, otherwise every YAML file below it.
// configPath, relative to dir, names the controller configuration (a
// fleet-controller ConfigMap or its config document); empty: the ConfigMap
// fleet-controller among the objects, else the defaults.
func Load(dir, source, configPath string) (*Tree, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", source)
	}
	var docs [][]byte
	var names []string
	if k := kustomizationIn(dir); k != "" {
		resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
		if err != nil {
			return nil, fmt.Errorf("%s: kustomize build: %w", source, err)
		}
		for i, r := range resMap.Resources() {
			y, err := r.AsYAML()
			if err != nil {
				return nil, fmt.Errorf("%s: kustomize build: %w", source, err)
			}
			docs = append(docs, y)
			names = append(names, fmt.Sprintf("%s (kustomize build, resource %d)", source, i+1))
		}
	} else {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != dir {
				return filepath.SkipDir
			}
			if d.IsDir() || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
				return nil
			}
			rel, _ := filepath.Rel(dir, p)
			if configPath != "" && filepath.Clean(rel) == filepath.Clean(configPath) {
				return nil // read below, as the configuration
			}
			fileDocs, err := splitDocuments(p)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", source, rel, err)
			}
			for i, d := range fileDocs {
				docs = append(docs, d)
				names = append(names, fmt.Sprintf("%s: %s, document %d", source, rel, i+1))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	t := &Tree{Source: source, Clusters: map[string]*fleet.Cluster{}, Tokens: map[string]*fleet.ClusterRegistrationToken{},
		Bundles: map[string]*fleet.Bundle{}, Groups: map[string][]fleet.ClusterGroup{}, Secrets: map[string]*corev1.Secret{}, Encrypted: map[string]bool{}}
	for i, d := range docs {
		if err := t.add(d); err != nil {
			return nil, fmt.Errorf("%s: %w", names[i], err)
		}
	}
	for ws := range t.Groups {
		sort.Slice(t.Groups[ws], func(i, j int) bool { return t.Groups[ws][i].Name < t.Groups[ws][j].Name })
	}
	if configPath != "" {
		cfg, err := ReadConfig(filepath.Join(dir, configPath))
		if err != nil {
			return nil, fmt.Errorf("%s: the controller configuration %s: %w", source, configPath, err)
		}
		t.Config, t.ConfigFrom = cfg, configPath
	}
	if t.Config == nil {
		t.Config, t.ConfigFrom = &config.Config{}, "defaults"
	}
	return t, nil
}

// HasFleetObjects reports whether the side holds any fleet.cattle.io object
// fleet diff compares (a side without any is most likely the wrong
// directory).
func (t *Tree) HasFleetObjects() bool {
	return len(t.Clusters)+len(t.Tokens)+len(t.Bundles)+len(t.Groups) > 0
}

func kustomizationIn(dir string) string {
	for _, n := range []string{"kustomization.yaml", "kustomization.yml", "Kustomization"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			return n
		}
	}
	return ""
}

// splitDocuments returns the non-empty YAML documents of a file.
func splitDocuments(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	r := utilyaml.NewYAMLReader(bufioReader(data))
	for {
		doc, err := r.Read()
		if errors.Is(err, errEOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		out = append(out, doc)
	}
}

// stripComments drops comment-only lines (an empty document).
func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			b.Write(l)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// add decodes one document; kinds that are not registration objects are
// skipped.
func (t *Tree) add(doc []byte) error {
	u := &unstructured.Unstructured{}
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return fmt.Errorf("not YAML: %w", err)
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(js, &meta); err != nil || meta.APIVersion == "" || meta.Kind == "" {
		// Not a Kubernetes object (a chart's Chart.yaml, a values file):
		// nothing a GitOps tool applies.
		return nil
	}
	if err := u.UnmarshalJSON(js); err != nil {
		return fmt.Errorf("not a Kubernetes object: %w", err)
	}
	gv := u.GetAPIVersion()
	isFleet := strings.HasPrefix(gv, fleet.GroupVersion.Group+"/")
	// A document of a SOPS file carries the file's sops metadata (every
	// document does): it is not part of the object, and a new encryption of
	// an unchanged object must not show as a change.
	encrypted := false
	if m, ok := u.Object["sops"].(map[string]any); ok && m["mac"] != nil {
		encrypted = true
		delete(u.Object, "sops")
		if doc, err = u.MarshalJSON(); err != nil {
			return err
		}
		if isFleet && holdsCiphertext(u.Object) {
			return fmt.Errorf("%s %s/%s holds SOPS-encrypted values: only Secrets may be encrypted (fleet's source component refuses it too); leave it in clear (sops encrypted_regex: ^(data|stringData)$)", u.GetKind(), u.GetNamespace(), u.GetName())
		}
	}
	ns := u.GetNamespace()
	if ns == "" {
		ns = DefaultWorkspace
	}
	key := ns + "/" + u.GetName()
	switch {
	case isFleet && u.GetKind() == "Cluster":
		c := &fleet.Cluster{}
		if err := strictyaml.Unmarshal(doc, c); err != nil {
			return fmt.Errorf("Cluster %s: %w", key, err)
		}
		c.Namespace = ns
		if _, dup := t.Clusters[key]; dup {
			return fmt.Errorf("Cluster %s is defined twice", key)
		}
		t.Clusters[key] = c
	case isFleet && u.GetKind() == "ClusterRegistrationToken":
		tok := &fleet.ClusterRegistrationToken{}
		if err := strictyaml.Unmarshal(doc, tok); err != nil {
			return fmt.Errorf("ClusterRegistrationToken %s: %w", key, err)
		}
		tok.Namespace = ns
		t.Tokens[key] = tok
	case isFleet && u.GetKind() == "Bundle":
		b := &fleet.Bundle{}
		if err := strictyaml.Unmarshal(doc, b); err != nil {
			return fmt.Errorf("Bundle %s: %w", key, err)
		}
		b.Namespace = ns
		t.Bundles[key] = b
	case isFleet && u.GetKind() == "ClusterGroup":
		g := fleet.ClusterGroup{}
		if err := strictyaml.Unmarshal(doc, &g); err != nil {
			return fmt.Errorf("ClusterGroup %s: %w", key, err)
		}
		g.Namespace = ns
		t.Groups[ns] = append(t.Groups[ns], g)
	case gv == "v1" && u.GetKind() == "Secret" && encrypted:
		// Its values are ciphertext (and data no longer base64): keep
		// only that it exists.
		s := &corev1.Secret{}
		s.Name, s.Namespace = u.GetName(), ns
		t.Secrets[key] = s
		t.Encrypted[key] = true
	case gv == "v1" && u.GetKind() == "Secret":
		s := &corev1.Secret{}
		if err := yaml.Unmarshal(doc, s); err != nil {
			return fmt.Errorf("Secret %s: %w", key, err)
		}
		s.Namespace = ns
		t.Secrets[key] = s
	case gv == "v1" && u.GetKind() == "ConfigMap" && u.GetName() == config.ConfigMapName:
		cm := &corev1.ConfigMap{}
		if err := yaml.Unmarshal(doc, cm); err != nil {
			return fmt.Errorf("not a valid ConfigMap: %w", err)
		}
		cfg, err := config.FromConfigMap(cm)
		if err != nil {
			return fmt.Errorf("ConfigMap %s: %w", config.ConfigMapName, err)
		}
		t.Config, t.ConfigFrom = cfg, "ConfigMap "+ns+"/"+u.GetName()
	}
	return nil
}

// holdsCiphertext reports whether a decoded document holds a SOPS-encrypted
// value.
func holdsCiphertext(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			if holdsCiphertext(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if holdsCiphertext(e) {
				return true
			}
		}
	case string:
		return strings.HasPrefix(v, "ENC[AES256_GCM,")
	}
	return false
}

// ReadConfig reads the controller configuration from a fleet-controller
// ConfigMap file or a bare config document.
func ReadConfig(path string) (*config.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var meta struct {
		Kind string `json:"kind"`
	}
	_ = yaml.Unmarshal(data, &meta)
	if meta.Kind == "ConfigMap" {
		cm := &corev1.ConfigMap{}
		if err := yaml.Unmarshal(data, cm); err != nil {
			return nil, err
		}
		return config.FromConfigMap(cm)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		if keys := chartValuesKeys(data); len(keys) >= 2 {
			return nil, fmt.Errorf("this looks like the values of charts/fleet (%s), not the controller configuration: give the fleet-controller ConfigMap the chart makes of them, from your installation (kubectl -n cattle-fleet-system get configmap fleet-controller -o yaml > fleet-controller.yaml) or rendered offline (helm template fleet charts/fleet -n cattle-fleet-system -f %s --show-only templates/configmap.yaml > fleet-controller.yaml)",
				strings.Join(keys, ", "), path)
		}
		return nil, err
	}
	return cfg, nil
}

// chartOnlyValues are top-level values of charts/fleet that the controller
// configuration does not have.
var chartOnlyValues = []string{"affinity", "agent", "bundleRendering", "capi", "extraArgs", "global", "image", "imagePullSecrets",
	"leaderElection", "metrics", "nodeSelector", "priorityClassName", "probePort", "registrationAdmins", "registrationApprovers",
	"registrationTokenTTL", "renderer", "replicas", "resources", "shards", "tolerations"}

// chartValuesKeys are the top-level keys of data that only chart values
// have (a few of them: enough to recognise the file).
func chartValuesKeys(data []byte) []string {
	var top map[string]any
	if yaml.Unmarshal(data, &top) != nil {
		return nil
	}
	var keys []string
	for _, k := range chartOnlyValues {
		if _, ok := top[k]; ok && len(keys) < 4 {
			keys = append(keys, k)
		}
	}
	return keys
}

var errEOF = io.EOF

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

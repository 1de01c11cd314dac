package kustomize

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// ChartOutput is the file name under which the chart's output is given to
// a kustomize overlay.
const ChartOutput = "fleet-chart-output.yaml"

// BuildOverlay runs kustomize on an in-memory copy of the overlay files, with
// the given manifests added to the root kustomization's resources. It is
// Build with the overlay's root as the kustomization.
func BuildOverlay(files map[string][]byte, manifests []byte) ([]byte, error) {
	return Build(files, ".", manifests)
}

// Build runs kustomize on an in-memory copy of a Bundle's files,
// building the kustomization in dir (a path of the Bundle), with the given
// manifests (a chart's output), when not nil, added to its resources. Every
// file of the Bundle is there, so a kustomization reaches its bases
// (`../base`) anywhere in the Bundle, as Fleet's kustomize build does; nothing
// outside the Bundle exists. A kustomization that names a URL or a repository
// is refused before kustomize runs (CheckOverlayFiles): kustomize's loader
// would fetch it whatever the filesystem. Plugins are off and kustomize
// panics become errors.
func Build(files map[string][]byte, dir string, manifests []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("kustomize overlay: internal error: %v", r)
		}
	}()
	if err := CheckOverlayFiles(files); err != nil {
		return nil, err
	}
	const root = "/bundle"
	fsys := filesys.MakeFsInMemory()
	for name, data := range files {
		p := path.Join(root, path.Clean("/"+name))
		if err := fsys.MkdirAll(path.Dir(p)); err != nil {
			return nil, err
		}
		if err := fsys.WriteFile(p, data); err != nil {
			return nil, err
		}
	}
	dir = path.Clean("/" + dir)
	kdir := path.Join(root, dir)
	kname := path.Join(strings.TrimPrefix(dir, "/"), "kustomization.yaml")
	kfile, ok := files[kname]
	if !ok {
		if dir == "/" {
			return nil, errors.New("kustomize overlay has no kustomization.yaml at its root")
		}
		return nil, fmt.Errorf("kustomize overlay has no kustomization.yaml in %s", strings.TrimPrefix(dir, "/"))
	}
	k := kustypes.Kustomization{}
	if err := yaml.UnmarshalStrict(kfile, &k); err != nil {
		return nil, fmt.Errorf("kustomize overlay: %s is invalid: %w", kname, err)
	}
	if manifests != nil {
		if err := fsys.WriteFile(path.Join(kdir, ChartOutput), manifests); err != nil {
			return nil, err
		}
		k.Resources = append([]string{ChartOutput}, k.Resources...)
		kb, err := yaml.Marshal(k)
		if err != nil {
			return nil, err
		}
		// What kustomize reads is this rewrite: check it too, in case the
		// two decoders ever read the author's file differently.
		if err := CheckOverlayFiles(map[string][]byte{kname: kb}); err != nil {
			return nil, err
		}
		if err := fsys.WriteFile(path.Join(kdir, "kustomization.yaml"), kb); err != nil {
			return nil, err
		}
	}
	opts := krusty.MakeDefaultOptions()
	opts.PluginConfig = kustypes.DisabledPluginConfig()
	opts.LoadRestrictions = kustypes.LoadRestrictionsRootOnly
	resMap, err := krusty.MakeKustomizer(opts).Run(fsys, kdir)
	if err != nil {
		return nil, fmt.Errorf("kustomize overlay: %s", strings.ReplaceAll(err.Error(), root+"/", ""))
	}
	y, err := resMap.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize overlay: %w", err)
	}
	return y, nil
}

package proxy

import (
	"encoding/json"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Group and Version of the aggregated API fleet-proxy serves.
const (
	Group        = "proxy.fleet.cattle.io"
	Version      = "v1alpha1"
	GroupVersion = Group + "/" + Version
	// APIServiceName is the name of the APIService that points the upstream
	// API server at fleet-proxy.
	APIServiceName = Version + "." + Group
)

// prefix of every path of the group version.
const prefix = "/apis/" + GroupVersion

func apiGroup() metav1.APIGroup {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: GroupVersion, Version: Version}
	return metav1.APIGroup{
		TypeMeta:         metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name:             Group,
		Versions:         []metav1.GroupVersionForDiscovery{gv},
		PreferredVersion: gv,
	}
}

func apiResources() metav1.APIResourceList {
	return metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: GroupVersion,
		APIResources: []metav1.APIResource{
			// Nothing is stored: clusters exists so that its subresources do.
			{Name: "clusters", SingularName: "cluster", Namespaced: true, Kind: "Cluster", Verbs: metav1.Verbs{}},
			{Name: "clusters/proxy", Namespaced: true, Kind: "ClusterProxyOptions", Verbs: metav1.Verbs{"create", "delete", "get", "patch", "update"}},
			{Name: "clusters/attach", Namespaced: true, Kind: "ClusterAttachOptions", Verbs: metav1.Verbs{"get"}},
			{Name: "clusters/token", Namespaced: true, Kind: "DirectTokenRequest", Verbs: metav1.Verbs{"create"}},
			{Name: "clusters/revocations", Namespaced: true, Kind: "DirectTokenRevocations", Verbs: metav1.Verbs{"get"}},
			{Name: "signingkeys", SingularName: "signingkeys", Namespaced: false, Kind: "SigningKeys", Verbs: metav1.Verbs{"get", "list"}},
		},
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func (s *Server) discovery(mux *http.ServeMux) {
	mux.HandleFunc("GET /apis", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, metav1.APIGroupList{
			TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
			Groups:   []metav1.APIGroup{apiGroup()},
		})
	})
	mux.HandleFunc("GET /apis/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/apis", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /apis/"+Group, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, apiGroup())
	})
	mux.HandleFunc("GET "+prefix, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, apiResources())
	})
}

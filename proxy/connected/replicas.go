package connected

import (
	"context"
	"os"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// PodRunning is Options.Running for replicas named by their pod name in
// namespace: a replica runs while its pod exists and its containers run. A
// replica whose container restarted runs again, and at its start it ends
// the Trues its previous process wrote itself (they name it).
func PodRunning(cs kubernetes.Interface, namespace string) func(context.Context, string) (bool, error) {
	return func(ctx context.Context, name string) (bool, error) {
		if name == "" {
			return false, nil
		}
		pod, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return false, nil
		case err != nil:
			return false, err
		}
		if pod.Status.Phase != corev1.PodRunning || len(pod.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		for _, s := range pod.Status.ContainerStatuses {
			if s.State.Running == nil {
				return false, nil
			}
		}
		return true, nil
	}
}

// ReplicaName is this replica's name: $POD_NAME (the chart sets it from
// the pod's name), else the host name (a pod's host name is its name).
func ReplicaName() (string, error) {
	if n := os.Getenv("POD_NAME"); n != "" {
		return n, nil
	}
	return os.Hostname()
}

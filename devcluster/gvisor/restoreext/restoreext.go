// Package restoreext makes gVisor's containerd shim restore a pod from a checkpoint image.
//
// The kubelet and CRI have no restore call, but gVisor's shim has an extension point
// (pkg/shim/v1/extension): an extension may answer a container's Start with runsc's restore instead of
// its start. This one does so for every container of a pod whose annotation RestoreAnnotation names a
// checkpoint (containerd passes the pod annotation into the OCI spec when the runtime handler's
// pod_annotations lists it). The root (pause) container restores the whole sandbox from the image; each
// application container is then restored into it, matched by its CRI container name.
//
// The image is looked up only below <root>/<the pod's namespace>/<name>: a pod can name only
// checkpoints stored for its own namespace, never a path (another tenant's image holds its memory).
// The root is the environment variable RootEnv of the shim (inherited from containerd); unset, the
// extension is off and every pod starts as usual.
package restoreext

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	task "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/log"

	"gvisor.dev/gvisor/pkg/shim/v1/extension"
)

const (
	// RestoreAnnotation names the checkpoint a pod restores from (a name, not a path).
	RestoreAnnotation = "agentsession.dev/restore-from"
	// RootEnv is the directory holding checkpoints, one directory per namespace.
	RootEnv = "AGENTSESSION_CHECKPOINT_ROOT"
	namespaceAnnotation = "io.kubernetes.cri.sandbox-namespace"
)

var validName = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)

func init() {
	extension.NewExtension = newExtension
}

// restorer answers Start with Restore for the containers it recorded; everything else goes to next.
type restorer struct {
	extension.TaskServiceExt
	mu     sync.Mutex
	images map[string]string // container id -> image directory
}

var shared *restorer

func newExtension(ctx context.Context, next extension.TaskServiceExt, req *task.CreateTaskRequest) (extension.TaskServiceExt, error) {
	root := os.Getenv(RootEnv)
	if root == "" {
		return nil, nil
	}
	annotations, err := readAnnotations(req.Bundle)
	if err != nil {
		return nil, err
	}
	name, ok := annotations[RestoreAnnotation]
	if !ok {
		return nil, nil
	}
	image, err := imagePath(root, annotations[namespaceAnnotation], name)
	if err != nil {
		return nil, err
	}
	if shared == nil {
		shared = &restorer{TaskServiceExt: next, images: map[string]string{}}
	}
	shared.mu.Lock()
	shared.images[req.ID] = image
	shared.mu.Unlock()
	log.G(ctx).Infof("agentsession restore: container %s restores from %s", req.ID, image)
	return shared, nil
}

// imagePath is <root>/<namespace>/<name>, refused unless both are plain names and the image exists.
func imagePath(root, namespace, name string) (string, error) {
	if !validName.MatchString(namespace) {
		return "", fmt.Errorf("%s: the pod's namespace %q is not a plain name", RestoreAnnotation, namespace)
	}
	if !validName.MatchString(name) {
		return "", fmt.Errorf("%s: %q is not a checkpoint name (lowercase letters, digits, '.', '-')", RestoreAnnotation, name)
	}
	image := filepath.Join(root, namespace, name)
	if _, err := os.Stat(filepath.Join(image, "checkpoint.img")); err != nil {
		return "", fmt.Errorf("%s: no checkpoint %q in namespace %q: %w", RestoreAnnotation, name, namespace, err)
	}
	return image, nil
}

func readAnnotations(bundle string) (map[string]string, error) {
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("reading the container's spec: %w", err)
	}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("parsing the container's spec: %w", err)
	}
	return spec.Annotations, nil
}

// Start restores a recorded container (its init process only) instead of starting it.
func (r *restorer) Start(ctx context.Context, req *task.StartRequest) (*task.StartResponse, error) {
	r.mu.Lock()
	image, ok := r.images[req.ID]
	r.mu.Unlock()
	if !ok || req.ExecID != "" {
		return r.TaskServiceExt.Start(ctx, req)
	}
	log.G(ctx).Infof("agentsession restore: restoring container %s from %s", req.ID, image)
	return r.TaskServiceExt.Restore(ctx, &extension.RestoreRequest{
		Start: req,
		Conf:  extension.RestoreConfig{ImagePath: image},
	})
}

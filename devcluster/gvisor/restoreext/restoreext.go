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
// Within the namespace, an image restores only into the one pod its node agent named (TargetName, under
// the manifest: the pod the session's wake creates), and only into that pod's first sandbox: the kubelet
// builds a pod's next sandbox (after a crash, a memory hog) from the same annotations, and that one starts
// fresh (RestoredSuffix records which sandbox took the image). A pod refused on these grounds starts fresh
// and spoils nothing: no record is written, the named pod still restores.
// The root is the environment variable RootEnv of the shim (inherited from containerd); unset, the
// extension is off and every pod starts as usual.
//
// A restore that cannot work never keeps the pod from starting (its workspace must stay usable): an
// image that is missing or fails its integrity check (the manifest of sha256 sums the node agent writes
// into it, ManifestName) is never handed to runsc; the sandbox and its containers start fresh, and the
// failure is recorded in <root>/<namespace>/.<name>.restore-failed (FailedSuffix), which the node agent
// reports to the operator. A restore runsc itself refuses after the check (its sandbox is then unusable:
// runsc leaves it in state restoreFailed) is recorded the same way and fails this start; the kubelet's
// next sandbox for the pod finds the record and starts fresh.
package restoreext

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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
	// ManifestName is the file in an image listing "<sha256 hex>  <file>" for every other file of it.
	ManifestName = "agentsession.sha256"
	// FailedSuffix: <root>/<namespace>/.<name><FailedSuffix> holds why a restore from <name> failed.
	FailedSuffix = ".restore-failed"
	// TargetName is the file in an image naming the one pod (of its namespace) it restores into.
	TargetName = "agentsession.pod"
	// RestoredSuffix: <root>/<namespace>/.<name><RestoredSuffix> holds the id of the sandbox that took the
	// image; no other sandbox restores from it.
	RestoredSuffix = ".restored"

	namespaceAnnotation = "io.kubernetes.cri.sandbox-namespace"
	podNameAnnotation   = "io.kubernetes.cri.sandbox-name"
	sandboxIDAnnotation = "io.kubernetes.cri.sandbox-id"
	typeAnnotation      = "io.kubernetes.cri.container-type"
	maxRecord           = 2048
	maxManifest         = 64 << 10
)

var (
	validName = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)
	sumLine   = regexp.MustCompile(`^([0-9a-f]{64})  ([A-Za-z0-9._-]+)$`)
)

func init() {
	extension.NewExtension = newExtension
}

// restorer answers Start with Restore for the containers it recorded; everything else goes to next.
type restorer struct {
	extension.TaskServiceExt
	mu     sync.Mutex
	images map[string]image // container id -> its image
	fresh  map[string]bool  // sandbox ids whose restore was given up: their containers start fresh
}

type image struct {
	root, namespace, name string
}

func (i image) dir() string { return filepath.Join(i.root, i.namespace, i.name) }

var shared = &restorer{images: map[string]image{}, fresh: map[string]bool{}}

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
	sandbox := annotations[sandboxIDAnnotation]
	if annotations[typeAnnotation] == "sandbox" {
		sandbox = req.ID
	}
	img := image{root, annotations[namespaceAnnotation], name}
	if err := checkNames(img); err != nil {
		// Nowhere safe to record it (the names are the record's path): the pod starts fresh, logged.
		log.G(ctx).Warnf("agentsession restore: container %s starts fresh: %v", req.ID, err)
		return nil, nil
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.fresh[sandbox] {
		return nil, nil
	}
	if why, failed := readRecord(img); failed {
		log.G(ctx).Warnf("agentsession restore: container %s starts fresh: the restore from %s failed: %s", req.ID, img.dir(), why)
		shared.fresh[sandbox] = true
		return nil, nil
	}
	if annotations[typeAnnotation] == "sandbox" {
		if err := verify(img.dir()); err != nil {
			err = fmt.Errorf("%s: checkpoint %q of namespace %q not restored, the pod started fresh: %w", RestoreAnnotation, name, img.namespace, err)
			log.G(ctx).Warnf("agentsession restore: container %s starts fresh: %v", req.ID, err)
			writeRecord(ctx, img, err)
			shared.fresh[sandbox] = true
			return nil, nil
		}
		// Not the image's pod, or not its first sandbox: fresh, unrecorded (the image stays the named
		// pod's: a pod naming another's image must not be able to spoil its restore).
		if err := claim(img, annotations[podNameAnnotation], sandbox); err != nil {
			log.G(ctx).Warnf("agentsession restore: container %s starts fresh: %s: checkpoint %q: %v", req.ID, RestoreAnnotation, name, err)
			shared.fresh[sandbox] = true
			return nil, nil
		}
	} else if taker := readTaker(img); taker != sandbox {
		log.G(ctx).Warnf("agentsession restore: container %s starts fresh: checkpoint %q was taken by sandbox %q, not its own", req.ID, name, taker)
		return nil, nil
	}
	shared.TaskServiceExt = next
	shared.images[req.ID] = img
	log.G(ctx).Infof("agentsession restore: container %s restores from %s", req.ID, img.dir())
	return shared, nil
}

// checkNames refuses anything but plain names: the image is <root>/<namespace>/<name>, never a path.
func checkNames(img image) error {
	if !validName.MatchString(img.namespace) {
		return fmt.Errorf("%s: the pod's namespace %q is not a plain name", RestoreAnnotation, img.namespace)
	}
	if !validName.MatchString(img.name) {
		return fmt.Errorf("%s: %q is not a checkpoint name (lowercase letters, digits, '.', '-')", RestoreAnnotation, img.name)
	}
	return nil
}

// verify checks the image against its manifest: every file listed, present, with its sha256, and no
// other file; checkpoint.img and TargetName among them. Cheap next to a restore (one read of the image).
func verify(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
		return fmt.Errorf("no checkpoint image: %w", err)
	}
	sums, err := readManifest(filepath.Join(dir, ManifestName))
	if err != nil {
		return err
	}
	if _, ok := sums["checkpoint.img"]; !ok {
		return fmt.Errorf("the manifest does not list checkpoint.img")
	}
	if _, ok := sums[TargetName]; !ok {
		return fmt.Errorf("the image names no pod to restore into (%s: an image of an older node agent)", TargetName)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, entry := range entries {
		if entry.Name() == ManifestName {
			continue
		}
		if _, ok := sums[entry.Name()]; !ok || !entry.Type().IsRegular() {
			return fmt.Errorf("%s is not in the manifest (or not a regular file)", entry.Name())
		}
	}
	for file, want := range sums {
		got, err := sha256File(filepath.Join(dir, file))
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s is corrupt: sha256 %s, the manifest says %s", file, got, want)
		}
	}
	return nil
}

// claim makes sandbox the one that restores from img: refused unless the image names pod (its TargetName,
// verified with the manifest) and no sandbox took it before (the record is created exclusively).
func claim(img image, pod, sandbox string) error {
	data, err := os.ReadFile(filepath.Join(img.dir(), TargetName))
	if err != nil {
		return fmt.Errorf("the image names no pod to restore into: %w", err)
	}
	if target := strings.TrimSpace(string(data)); target != pod {
		return fmt.Errorf("the image restores only into pod %q, not %q", target, pod)
	}
	taken, err := os.OpenFile(takerPath(img), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("the image was restored already (by sandbox %q): only a pod's first sandbox restores: %w", readTaker(img), err)
	}
	defer taken.Close()
	if _, err := taken.WriteString(sandbox); err != nil {
		return fmt.Errorf("recording the sandbox that restores: %w", err)
	}
	return nil
}

func takerPath(img image) string {
	return filepath.Join(img.root, img.namespace, "."+img.name+RestoredSuffix)
}

// readTaker: the id of the sandbox that took img, "" when none did.
func readTaker(img image) string {
	f, err := os.Open(takerPath(img))
	if err != nil {
		return ""
	}
	defer f.Close()
	data, _ := io.ReadAll(io.LimitReader(f, maxRecord))
	return string(data)
}

func readManifest(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("no integrity manifest: %w", err)
	}
	defer f.Close()
	sums := map[string]string{}
	lines := bufio.NewScanner(io.LimitReader(f, maxManifest))
	for lines.Scan() {
		m := sumLine.FindStringSubmatch(lines.Text())
		if m == nil || m[2] == ManifestName {
			return nil, fmt.Errorf("the manifest has a malformed line: %.80q", lines.Text())
		}
		sums[m[2]] = m[1]
	}
	if err := lines.Err(); err != nil {
		return nil, fmt.Errorf("reading the manifest: %w", err)
	}
	return sums, nil
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func recordPath(img image) string {
	return filepath.Join(img.root, img.namespace, "."+img.name+FailedSuffix)
}

// readRecord: whether a restore from img already failed (a record there), and why.
func readRecord(img image) (string, bool) {
	f, err := os.Open(recordPath(img))
	if err != nil {
		return "", false
	}
	defer f.Close()
	data, _ := io.ReadAll(io.LimitReader(f, maxRecord))
	return string(data), true
}

// writeRecord leaves why the restore failed for the node agent to report (bounded, root only).
func writeRecord(ctx context.Context, img image, cause error) {
	message := strings.ToValidUTF8(cause.Error(), "?")
	if len(message) > maxRecord {
		message = strings.ToValidUTF8(message[:maxRecord], "")
	}
	err := os.MkdirAll(filepath.Join(img.root, img.namespace), 0o700)
	if err == nil {
		err = os.WriteFile(recordPath(img), []byte(message), 0o600)
	}
	if err != nil {
		log.G(ctx).Errorf("agentsession restore: recording the failed restore from %s: %v", img.dir(), err)
	}
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

// Start restores a recorded container (its init process only) instead of starting it. A restore runsc
// fails is recorded (the pod's next sandbox starts fresh) and fails this start: runsc leaves the sandbox
// in state restoreFailed, where no fresh start of it is possible.
func (r *restorer) Start(ctx context.Context, req *task.StartRequest) (*task.StartResponse, error) {
	r.mu.Lock()
	img, ok := r.images[req.ID]
	r.mu.Unlock()
	if !ok || req.ExecID != "" {
		return r.TaskServiceExt.Start(ctx, req)
	}
	log.G(ctx).Infof("agentsession restore: restoring container %s from %s", req.ID, img.dir())
	resp, err := r.TaskServiceExt.Restore(ctx, &extension.RestoreRequest{
		Start: req,
		Conf:  extension.RestoreConfig{ImagePath: img.dir()},
	})
	if err != nil {
		writeRecord(ctx, img, fmt.Errorf("%s: runsc could not restore checkpoint %q (the pod's next start is fresh): %w", RestoreAnnotation, img.name, err))
	}
	return resp, err
}

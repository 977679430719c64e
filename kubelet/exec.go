package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	utilexec "k8s.io/utils/exec"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// sandboxOf is the sandbox of the node's pod namespace/name, as a
// handle; a pod whose sandbox is not made (yet) is an error that says so.
func (p *Provider) sandboxOf(ctx context.Context, namespace, name, container string) (*client.Sandbox, *podEntry, error) {
	p.mu.Lock()
	e, ok := p.pods[podKey(namespace, name)]
	p.mu.Unlock()
	if !ok {
		return nil, nil, errNoSuchPod(namespace, name)
	}
	e.mu.Lock()
	id, failed, cname := e.obs.SandboxID, e.obs.Failed, e.pod.Spec.Containers[0].Name
	e.mu.Unlock()
	switch {
	case container != "" && container != cname:
		return nil, nil, fmt.Errorf("pod %s/%s has one container, %q, not %q", namespace, name, cname, container)
	case id == "" && failed != "":
		return nil, nil, fmt.Errorf("pod %s/%s has no sandbox: %s", namespace, name, failed)
	case id == "":
		return nil, nil, fmt.Errorf("pod %s/%s: its sandbox is being made", namespace, name)
	}
	c, err := p.client(ctx)
	if err != nil {
		return nil, nil, err
	}
	return c.Handle(sandboxd1.ListEntry{ID: id}), e, nil
}

// RunInContainer is kubectl exec: cmd runs in the pod's sandbox as the
// kubelet's user (Exec, or ExecTerminal with a tty, whose size follows
// the client's). A command that ran and failed is an exit error with its
// status, which kubectl exits with.
func (p *Provider) RunInContainer(ctx context.Context, namespace, name, container string, cmd []string, attach api.AttachIO) error {
	sb, _, err := p.sandboxOf(ctx, namespace, name, container)
	if err != nil {
		return err
	}
	var st client.ExitStatus
	if attach.TTY() {
		st, err = onTerminal(ctx, sb, cmd, attach)
	} else {
		opts := client.ExecOptions{Stdin: attach.Stdin()}
		if w := attach.Stdout(); w != nil {
			opts.Stdout = w
		}
		if w := attach.Stderr(); w != nil {
			opts.Stderr = w
		}
		st, err = sb.Exec(ctx, cmd, opts)
	}
	if err != nil {
		return err
	}
	return exitError(st)
}

// exitError is st as the exec API's exit error; nil for a success.
func exitError(st client.ExitStatus) error {
	if st.Success() {
		return nil
	}
	return utilexec.CodeExitError{Err: fmt.Errorf("command %s", st), Code: int(st.Code)}
}

// onTerminal runs cmd on a terminal of the sandbox's and joins it to
// the client's streams: stdin to the terminal, the terminal to stdout,
// the client's size to the terminal's.
func onTerminal(ctx context.Context, sb *client.Sandbox, cmd []string, attach api.AttachIO) (client.ExitStatus, error) {
	t, err := sb.ExecTerminal(ctx, cmd, client.ExecOptions{}, 24, 80)
	if err != nil {
		return client.ExitStatus{}, err
	}
	defer t.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			select {
			case s, ok := <-attach.Resize():
				if !ok {
					return
				}
				_ = t.Resize(s.Height, s.Width)
			case <-ctx.Done():
				return
			}
		}
	}()
	if in := attach.Stdin(); in != nil {
		go func() { _, _ = io.Copy(t.File, in) }()
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		if out := attach.Stdout(); out != nil {
			_, _ = io.Copy(out, t.File)
		}
	}()
	st, err := t.Wait(ctx)
	// The terminal's last output: the master reads EIO once the command
	// and all that held the terminal ended.
	<-drained
	return st, err
}

// AttachToContainer is kubectl attach: the pod's background process's
// output from now on, until it ends or the client goes. The process has
// no stdin nor terminal to join: -i and -t are refused, saying so.
func (p *Provider) AttachToContainer(ctx context.Context, namespace, name, container string, attach api.AttachIO) error {
	sb, e, err := p.sandboxOf(ctx, namespace, name, container)
	if err != nil {
		return err
	}
	if attach.Stdin() != nil || attach.TTY() {
		return errors.New("a sandbox's background process has no stdin or terminal to join: " +
			"kubectl attach without -i and -t shows its output; kubectl exec -it runs a command on a terminal")
	}
	e.mu.Lock()
	process := e.process
	e.mu.Unlock()
	if process == "" {
		return fmt.Errorf("pod %s/%s has no command, so nothing to attach to: kubectl exec runs a command in its sandbox", namespace, name)
	}
	var out io.Writer = io.Discard
	if w := attach.Stdout(); w != nil {
		out = w
	}
	off, err := logEnd(ctx, sb, process)
	if err != nil {
		return err
	}
	return follow(ctx, sb, process, off, 0, out)
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	sdconfig "github.com/sandboxd/sandboxd/supervisor/config"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// start installs sandboxd as an operator would (the bus policy, the unit
// with ExecStart at the built binary, a configuration naming the
// projects), starts it, and connects to the system bus.
func (d *daemon) start(ctx context.Context, root string, projects map[string]string) error {
	if d.repo == "" {
		return errors.New("installing sandboxd: not run from the repository (no go.mod above the working directory)")
	}
	if out, _ := command(ctx, "systemctl", "is-active", daemonUnit).Output(); strings.TrimSpace(string(out)) == "active" {
		return fmt.Errorf("installing sandboxd: %s already runs in this testbed; stop it first (systemctl stop %s)", daemonUnit, daemonUnit)
	}
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		return fmt.Errorf("connecting to the system bus: %w", err)
	}
	d.conn = conn

	d.configPath = filepath.Join(benchConfigDir, "sandboxd.toml")
	d.root, d.projects = root, projects
	if err := d.writeConfig(false); err != nil {
		return err
	}

	// The policy lets root own the name. One already there (a testbed
	// left up after the integration tests) is the same file and stays.
	if _, err := os.Stat(policyPath); errors.Is(err, os.ErrNotExist) {
		policy, err := os.ReadFile(filepath.Join(d.repo, "packaging", "dbus", "org.sandboxd1.conf"))
		if err != nil {
			return fmt.Errorf("installing the bus policy: %w", err)
		}
		d.wrotePol = true
		if err := os.WriteFile(policyPath, policy, 0o644); err != nil {
			return fmt.Errorf("installing the bus policy: %w", err)
		}
		if err := d.reloadBus(ctx); err != nil {
			return err
		}
	}

	unit, err := os.ReadFile(filepath.Join(d.repo, "packaging", "systemd", daemonUnit))
	if err != nil {
		return fmt.Errorf("installing %s: %w", daemonUnit, err)
	}
	const stock = "ExecStart=/usr/bin/sandboxd"
	if !bytes.Contains(unit, []byte(stock)) {
		return fmt.Errorf("installing %s: the packaged unit has no %q line to point at the built binary", daemonUnit, stock)
	}
	unit = bytes.ReplaceAll(unit, []byte(stock), fmt.Appendf(nil, "ExecStart=%s --config %s", d.bin, d.configPath))
	d.wroteUnit = true
	if err := os.WriteFile(unitPath, unit, 0o644); err != nil {
		return fmt.Errorf("installing %s: %w", daemonUnit, err)
	}
	if _, err := tool(ctx, "systemctl", "daemon-reload"); err != nil {
		return fmt.Errorf("installing %s: %w", daemonUnit, err)
	}
	d.started = true
	// Type=notify: this returns once the daemon has said READY=1, after
	// its reconcile and with its name on the bus.
	progress("daemon: starting %s", daemonUnit)
	if _, err := tool(ctx, "systemctl", "start", daemonUnit); err != nil {
		return fmt.Errorf("starting sandboxd: %w; its journal: %s", err, d.journal(ctx))
	}

	// A run killed inside a testbed that stayed up leaves sandboxes in
	// the state directory; the daemon has adopted them. They go, and the
	// daemon restarts, so that its memory is measured from none.
	left, err := d.list(ctx)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		progress("daemon: destroying %d sandboxes left by an earlier run", len(left))
		for _, id := range left {
			if err := d.destroy(ctx, id); err != nil {
				return err
			}
		}
		if _, err := tool(ctx, "systemctl", "restart", daemonUnit); err != nil {
			return fmt.Errorf("restarting sandboxd: %w; its journal: %s", err, d.journal(ctx))
		}
	}
	return nil
}

// writeConfig writes the daemon's configuration, with sandboxes in user
// namespaces or without; the daemon reads it when it (re)starts.
func (d *daemon) writeConfig(userns bool) error {
	text, err := daemonConfig(d.configPath, d.root, d.projects, userns, d.pool)
	if err != nil {
		return err
	}
	d.wroteConf = true
	if err := os.MkdirAll(benchConfigDir, 0o755); err != nil {
		return fmt.Errorf("writing sandboxd's configuration: %w", err)
	}
	if err := os.WriteFile(d.configPath, text, 0o644); err != nil {
		return fmt.Errorf("writing sandboxd's configuration: %w", err)
	}
	d.userns = userns
	return nil
}

// reconfigure restarts the daemon with sandboxes in user namespaces or
// without. It is called with no sandbox live: each mode makes and
// destroys its own.
func (d *daemon) reconfigure(ctx context.Context, userns bool) error {
	if err := d.writeConfig(userns); err != nil {
		return err
	}
	progress("daemon: restarting %s with %s", daemonUnit, strings.TrimSpace(strings.ReplaceAll(sandboxTable(userns), "\n", " ")))
	// Type=notify: this returns once the daemon is ready again, its
	// probe of idmapped mounts done.
	if _, err := tool(ctx, "systemctl", "restart", daemonUnit); err != nil {
		return fmt.Errorf("restarting sandboxd (user namespaces %v): %w; its journal: %s", userns, err, d.journal(ctx))
	}
	return nil
}

// rootLayers are the layers of the testbed's root, top first: its root is
// an overlay, which cannot be idmapped, so a sandbox in a user namespace
// stacks idmapped mounts of each layer (testbed.Info.Layers).
var rootLayers = []string{filepath.Join(testbed.LayersDir, "upper"), filepath.Join(testbed.LayersDir, "lower")}

// sandboxTable is the configuration's [sandbox] table. Without user
// namespaces it says "off", rather than leave "auto" to find that the
// root cannot be idmapped, so that those rows are without them whatever
// the machine. With them, "require" makes a daemon that cannot give them
// fail to start instead of measuring sandboxes without.
func sandboxTable(userns bool) string {
	if !userns {
		return "\n[sandbox]\nuserns = \"off\"\n"
	}
	quoted := make([]string, len(rootLayers))
	for i, l := range rootLayers {
		quoted[i] = strconv.Quote(l)
	}
	return fmt.Sprintf("\n[sandbox]\nuserns = \"require\"\nroot_layers = [%s]\n", strings.Join(quoted, ", "))
}

// daemonConfig is the daemon's configuration: its pool at root on btrfs,
// its own state directory, user namespaces or not, the projects, and a
// warm pool of that many ready sandboxes per project and owner (0: none).
func daemonConfig(path, root string, projects map[string]string, userns bool, warm int) ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "[daemon]\nstate_dir = %q\n\n[storage]\nbackend = \"btrfs\"\n\n[storage.btrfs]\nroot = %q\n", benchStateDir, root)
	b.WriteString(sandboxTable(userns))
	var tail strings.Builder
	for name, dir := range projects {
		fmt.Fprintf(&tail, "\n[[project]]\nname = %q\npath = %q\n", name, dir)
	}
	// The caps of [limits], where the daemon has them, would refuse the
	// bench's 200 sandboxes of one user (32 by default; the memory
	// promised, 8 times the host's; a quarter of the tasks for one
	// user): they are lifted; sandboxd.slice's bounds stay. A
	// configuration that knows no [limits] has no caps, and must not
	// name the section.
	lifted := b.String() + "\n[limits]\nmax_sandboxes = 0\nmax_sandboxes_per_user = 0\nmax_memory = 0\nuser_memory_max = 0\nuser_tasks_max = 0\n"
	if warm > 0 {
		// The pool's members count against those bounds: none.
		lifted += fmt.Sprintf("pool = %d\n", warm)
	}
	lifted += tail.String()
	_, err := sdconfig.Parse([]byte(lifted), path)
	if err == nil {
		return []byte(lifted), nil
	}
	if warm > 0 {
		return nil, fmt.Errorf("writing sandboxd's configuration with a warm pool of %d: %w", warm, err)
	}
	plain := b.String() + tail.String()
	if _, err := sdconfig.Parse([]byte(plain), path); err != nil {
		return nil, fmt.Errorf("writing sandboxd's configuration: %w", err)
	}
	return []byte(plain), nil
}

// hostIDs is a sandbox's HostIDs property: the first and last host id of
// its user namespace, none when it has none.
func (d *daemon) hostIDs(id string) ([]uint32, error) {
	var ids []uint32
	if err := d.conn.Object(sandboxd1.BusName, sandboxd1.SandboxPath(id)).StoreProperty(sandboxd1.SandboxInterface+"."+sandboxd1.PropHostIDs, &ids); err != nil {
		return nil, fmt.Errorf("reading the host ids of sandbox %s: %w", id, err)
	}
	return ids, nil
}

// reloadBus makes dbus-daemon read its policy files again.
func (d *daemon) reloadBus(ctx context.Context) error {
	if err := d.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.ReloadConfig", 0).Err; err != nil {
		return fmt.Errorf("reloading the bus's policy: %w", err)
	}
	return nil
}

// journal is the end of the daemon's journal, for an error message.
func (d *daemon) journal(ctx context.Context) string {
	out, _ := command(ctx, "journalctl", "--no-pager", "-o", "cat", "-n", "15", "-u", daemonUnit).CombinedOutput()
	return strings.TrimSpace(string(out))
}

func (d *daemon) manager() dbus.BusObject {
	return d.conn.Object(sandboxd1.BusName, sandboxd1.ManagerPath)
}

// create makes a sandbox of project; the reply comes once it is ready.
func (d *daemon) create(ctx context.Context, project string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var id string
	var object dbus.ObjectPath
	err := d.manager().CallWithContext(ctx, sandboxd1.ManagerInterface+".CreateSandbox", 0, project, map[string]dbus.Variant{}).Store(&id, &object)
	if err != nil {
		return "", fmt.Errorf("creating a sandbox of %s: %w", project, err)
	}
	d.live[id] = true
	return id, nil
}

func (d *daemon) destroy(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := d.manager().CallWithContext(ctx, sandboxd1.ManagerInterface+".DestroySandbox", 0, id).Err; err != nil {
		return fmt.Errorf("destroying sandbox %s: %w", id, err)
	}
	delete(d.live, id)
	return nil
}

// list returns the ids of every sandbox the daemon has.
func (d *daemon) list(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var entries []sandboxd1.ListEntry
	if err := d.manager().CallWithContext(ctx, sandboxd1.ManagerInterface+".ListSandboxes", 0).Store(&entries); err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return ids, nil
}

// stop undoes start: it destroys every sandbox, stops the daemon, and
// removes what was installed. It carries on past errors, and what a
// failed destroy left is stopped here (its scope) or by the caller (its
// volumes, with the pool).
func (d *daemon) stop(ctx context.Context) error {
	var errs []error
	if d.started {
		if ids, err := d.list(ctx); err != nil {
			errs = append(errs, err)
		} else {
			for _, id := range ids {
				if err := d.destroy(ctx, id); err != nil {
					errs = append(errs, err)
				}
			}
		}
		if _, err := tool(ctx, "systemctl", "stop", daemonUnit); err != nil {
			errs = append(errs, fmt.Errorf("stopping sandboxd: %w", err))
		}
		_, _ = tool(ctx, "systemctl", "reset-failed", daemonUnit)
		// Scopes outlive the daemon (KillMode=mixed): those of sandboxes
		// it did not destroy must be stopped here.
		for id := range d.live {
			unit := "sandbox-" + id + ".scope"
			if out, _ := command(ctx, "systemctl", "is-active", unit).Output(); strings.TrimSpace(string(out)) == "active" {
				if _, err := tool(ctx, "systemctl", "stop", unit); err != nil {
					errs = append(errs, fmt.Errorf("stopping the scope of an undestroyed sandbox: %w", err))
				}
			}
		}
	}
	if d.wroteUnit {
		if err := os.Remove(unitPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing %s: %w", unitPath, err))
		}
		if _, err := tool(ctx, "systemctl", "daemon-reload"); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", daemonUnit, err))
		}
	}
	if d.wrotePol {
		if err := os.Remove(policyPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing the bus policy: %w", err))
		} else if err := d.reloadBus(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if d.wroteConf {
		if err := os.RemoveAll(benchConfigDir); err != nil {
			errs = append(errs, fmt.Errorf("removing sandboxd's configuration: %w", err))
		}
	}
	if d.started {
		if err := os.RemoveAll(benchStateDir); err != nil {
			errs = append(errs, fmt.Errorf("removing sandboxd's state: %w", err))
		}
	}
	if d.conn != nil {
		d.conn.Close()
	}
	return errors.Join(errs...)
}

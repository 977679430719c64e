package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// Issue 18's walk: a site the host's nginx serves from a plain directory
// is adopted where it lives (nginx goes on serving it), tried in a booted
// sandbox where the same nginx serves the sandbox's copy, reached through
// an exposed port, changed there (a page and the site's config) and
// promoted through a check that tests the config with nginx itself; the
// host's nginx serves the new page at once and the new config once
// reloaded.

const (
	siteDir  = "/srv/boot-site"
	siteName = "boot-site"
	siteAddr = "127.0.0.1:8081"
	// The site's config, in the project: nginx's conf.d includes it.
	siteConf = "server {\n\tlisten " + siteAddr + ";\n\troot " + siteDir + "/www;\n}\n"
	// The stage's check: nginx's own test of the whole config, as the
	// promotion would leave it (logs go to the check sandbox's /var/log).
	siteCheck = "mkdir -p /var/log/nginx && nginx -t -q\n"
)

// hostNginxServesSite puts the site on the host: its directory, the
// include in /etc/nginx/conf.d, nginx started with only the site (the
// default site, on every address's port 80, is set aside), and all of it
// undone at the end.
func hostNginxServesSite(t *testing.T) {
	t.Helper()
	os.RemoveAll(siteDir)
	for name, text := range map[string]string{"www/index.html": "v1\n", "site.conf": siteConf, "check.sh": siteCheck} {
		p := filepath.Join(siteDir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	include := "/etc/nginx/conf.d/boot-site.conf"
	if err := os.WriteFile(include, []byte("include "+siteDir+"/site.conf;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const def, aside = "/etc/nginx/sites-enabled/default", "/etc/nginx/default.aside"
	if err := os.Rename(def, aside); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = exec.Command("systemctl", "stop", "nginx.service").Run()
		_ = os.Rename(aside, def)
		os.Remove(include)
		ctl(t, "", "project", "release", siteName)
		os.RemoveAll(siteDir)
	})
	testbed.MustRun(t, "systemctl", "start", "nginx.service")
}

// getUntil fetches url until what it answers holds want (nginx's reload
// is done when its new workers answer), for at most 10 s.
func getUntil(t *testing.T, url, want string) string {
	t.Helper()
	var page string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if page = get(t, url); strings.Contains(page, want) {
			break
		}
	}
	return page
}

// get fetches url with curl (-i: with the headers) on the host.
func get(t *testing.T, url string) string {
	t.Helper()
	argv := []string{"curl", "-s", "-i", "--max-time", "10", url}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

func TestTheHostsSiteIsAdoptedTriedInABootedSandboxAndPromoted(t *testing.T) {
	install(t)
	hostNginxServesSite(t)
	if page := get(t, "http://"+siteAddr+"/"); !strings.HasSuffix(page, "\nv1\n") {
		t.Fatalf("the host's nginx, before anything: %q", page)
	}

	ok(t, "project", "adopt", siteName, siteDir)
	reconfigure(t, "[[stage]]\nname = \"site\"\ntarget = \"project\"\nchecks = [\"sh check.sh\"]\ncheck_timeout = \"1m\"\n")
	if page := get(t, "http://"+siteAddr+"/"); !strings.HasSuffix(page, "\nv1\n") {
		t.Fatalf("the host's nginx, serving the adopted directory: %q", page)
	}

	id, _ := bootSandbox(t, siteName)
	if out, errOut, code := ctl(t, "", "exec", "--root", id, "--", "systemctl", "start", "nginx"); code != 0 {
		log, _, _ := ctl(t, "", "exec", "--root", id, "--", "journalctl", "--no-pager", "-u", "nginx")
		t.Fatalf("starting nginx in the booted sandbox: exit %d: %s%s\n%s", code, out, errOut, log)
	}
	exposed := strings.TrimSpace(ok(t, "port", "--tcp", id, "8081"))
	if page := get(t, "http://"+exposed+"/"); !strings.HasSuffix(page, "\nv1\n") {
		t.Fatalf("the sandbox's nginx through exposed port %s: %q", exposed, page)
	}

	// Tried in the sandbox: a new page, and a header in the site's config.
	rootSh(t, id, `cd `+siteDir+` && echo v2 > www/index.html &&
		sed -i 's#^\troot .*#&\n\tadd_header X-Site tried;#' site.conf && systemctl reload nginx`)
	page := getUntil(t, "http://"+exposed+"/", "X-Site: tried")
	if !strings.Contains(page, "X-Site: tried") || !strings.HasSuffix(page, "\nv2\n") {
		t.Fatalf("the sandbox's nginx after the change, reloaded: %q", page)
	}
	if host := get(t, "http://"+siteAddr+"/"); !strings.HasSuffix(host, "\nv1\n") || strings.Contains(host, "X-Site") {
		t.Fatalf("the host's nginx changed before the promotion: %q", host)
	}

	// A change nginx refuses does not pass the check.
	bad := strings.TrimSpace(ok(t, "create", "--quiet", siteName))
	ok(t, "exec", "--root", bad, "--", "sh", "-c", "echo 'server { listen' >> "+siteDir+"/site.conf")
	if out, errOut, code := ctl(t, "", "promote", bad); code != 1 || !strings.Contains(out+errOut, "FAILED") {
		t.Errorf("promoting a config nginx refuses: exit %d\n%s%s", code, out, errOut)
	}
	ok(t, "destroy", bad)

	out := ok(t, "promote", id)
	if !strings.Contains(out, `check "sh check.sh": passed`) {
		t.Errorf("promote's output has no passed check:\n%s", out)
	}
	if host := get(t, "http://"+siteAddr+"/"); !strings.HasSuffix(host, "\nv2\n") {
		t.Errorf("the host's nginx after the promotion: %q; want the new page", host)
	}
	testbed.MustRun(t, "systemctl", "reload", "nginx.service")
	if host := getUntil(t, "http://"+siteAddr+"/", "X-Site: tried"); !strings.Contains(host, "X-Site: tried") {
		t.Errorf("the host's nginx after the promotion and a reload: %q; want the new header", host)
	}
}

package integration

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/console"
	"github.com/harmonykaas/harmony/controller/controllertest"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// TestConsoleInABrowser drives Debian's headless Chromium against a real
// controller on a simulated vCenter: logins typed with the keyboard, the
// clusters each user may see, a cluster's page, a refused login, and no
// script error or policy violation on any page. Screenshots go to
// out/console-screenshots for a reviewer (not committed).
func TestConsoleInABrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("no chromium on PATH: scripts/install-deps.sh installs Debian's")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Out of this process: the console's deletes race vcsim's reconfigures
	// inside it (UnregisterVM's RemoveReference against Datastore.resolve).
	sim := testutil.VCSimProcess(t)
	ctl := controllertest.Start(t)
	admin := ctl.Admin

	// Two clusters; uma may view one, nia none.
	provider := sim.Provider("lab", &v1.IPPool{Network: "198.18.21.0/24", Ranges: []string{"198.18.21.10-198.18.21.60"}, Gateway: "198.18.21.1"})
	if _, err := admin.ApplyProvider(ctx, &provider); err != nil {
		t.Fatal(err)
	}
	ova := smallNodeOVA(t, t.TempDir())
	f, err := os.Open(ova)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	op, _, err := admin.ImportImage(ctx, "lab", f, st.Size())
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if op != nil {
		if _, err := admin.WaitOperation(ctx, op.ID, nil); err != nil {
			t.Fatal(err)
		}
	}
	one := 1
	for i, name := range []string{"alpha", "beta"} {
		spec := &v1.ClusterSpec{APIVersion: v1.APIVersion, Kind: "Cluster", Name: name, Provider: "lab", Image: "harmony-node-2-0-0",
			Masters: &one, Workers: 1, VIP: "198.18.21." + []string{"50", "51"}[i],
			WorkerSize: &v1.NodeSize{CPUs: 1, MemoryMiB: 2048}}
		if _, err := admin.CreateCluster(ctx, spec); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	const password = "a console user's password"
	for _, u := range []v1.UserCreate{{Name: "ada", Role: v1.UserRoleAdmin}, {Name: "uma", Role: v1.UserRoleUser}, {Name: "nia", Role: v1.UserRoleUser}} {
		u.Password = password
		if _, err := admin.CreateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Grant(ctx, "alpha", v1.GrantRequest{User: "uma", Role: v1.GrantView}); err != nil {
		t.Fatal(err)
	}

	// Chromium trusts exactly the controller's key, nothing else.
	conn, err := tls.Dial("tcp", strings.TrimPrefix(ctl.URL(), "https://"), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	leaf := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: rootsOf(ctl.CA().Certificate())}); err != nil {
		t.Fatalf("the controller's certificate: %v", err)
	}
	spki := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.WindowSize(1280, 900),
		chromedp.Flag("ignore-certificate-errors-spki-list", base64.StdEncoding.EncodeToString(spki[:])))
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()

	shots := filepath.Join("..", "out", "console-screenshots")
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	page := ctl.URL() + console.PathPrefix
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }

	// newBrowser is a fresh browser (no cookies) that fails the test on
	// any script exception, or any error the page logs other than a
	// refused request (a policy violation included).
	newBrowser := func(t *testing.T) context.Context {
		bctx, cancel := chromedp.NewContext(alloc)
		t.Cleanup(cancel)
		if err := chromedp.Do(bctx); err != nil { // starts the browser
			t.Fatal(err)
		}
		err := chromedp.Listen(bctx, func(ev any) {
			switch e := ev.(type) {
			case *runtime.EventExceptionThrown:
				t.Errorf("script exception: %s", e.ExceptionDetails.Text)
			case *cdplog.EventEntryAdded:
				if e.Entry.Level == cdplog.EntryLevelError && e.Entry.Source != cdplog.EntrySourceNetwork {
					t.Errorf("the page logged an error (%s): %s", e.Entry.Source, e.Entry.Text)
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		return bctx
	}
	shot := func(b context.Context, name string) {
		t.Helper()
		png, err := chromedp.Run(b, chromedp.FullScreenshot(100))
		if err == nil {
			err = os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644)
		}
		if err != nil {
			t.Errorf("screenshot %s: %v", name, err)
		}
		// A value the script failed to render shows as such words.
		text, err := chromedp.Run(b, chromedp.Evaluate[string](`document.body.innerText`))
		for _, bad := range []string{"[object ", "undefined", "null", "NaN"} {
			if err == nil && strings.Contains(text, bad) {
				t.Errorf("page %s shows %q:\n%s", name, bad, text)
			}
		}
	}
	// step runs actions with a time limit, and on a failure leaves a
	// screenshot and the page's text in the log.
	step := func(t *testing.T, b context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(b, 90*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			shot(b, "failed-"+strings.ReplaceAll(what, " ", "-"))
			text, _ := chromedp.Run(b, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("%s: %v\npage:\n%s", what, err, text)
		}
	}
	erase := strings.Repeat(kb.Backspace, 20)
	// logIn types the credentials with the keyboard alone: the page puts
	// the focus in the user name, Tab goes to the password, Enter sends.
	logIn := func(b context.Context, user, pw string) error {
		return chromedp.Do(b, chromedp.Navigate(page), chromedp.WaitVisible(css(`form.login`)),
			chromedp.KeyEvent(user), chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(pw), chromedp.KeyEvent(kb.Enter))
	}
	count := func(b context.Context, sel string) int {
		t.Helper()
		n, err := chromedp.Run(b, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(sel)+`).length`))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("every input of the login form has a label", func(t *testing.T) {
		b := newBrowser(t)
		if err := chromedp.Do(b, chromedp.Navigate(page), chromedp.WaitVisible(css(`form.login`))); err != nil {
			t.Fatal(err)
		}
		shot(b, "login")
		unlabelled, err := chromedp.Run(b, chromedp.Evaluate[int](`[...document.querySelectorAll("input")].filter(i => i.labels.length === 0).length`))
		if err != nil || unlabelled != 0 {
			t.Errorf("%d inputs without a label (%v)", unlabelled, err)
		}
	})

	t.Run("a wrong password is refused next to the field", func(t *testing.T) {
		b := newBrowser(t)
		if err := logIn(b, "ada", "not the password"); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(b, chromedp.WaitVisible(css(`#password-error:not(:empty)`))); err != nil {
			t.Fatal(err)
		}
		msg, err := chromedp.Run(b, chromedp.Text(css(`#password-error`)))
		if err != nil || !strings.Contains(strings.ToLower(msg), "password") {
			t.Errorf("the refusal says %q (%v)", msg, err)
		}
	})

	t.Run("an admin sees every cluster and a cluster's nodes, and logs out", func(t *testing.T) {
		b := newBrowser(t)
		if err := logIn(b, "ada", password); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(b, chromedp.WaitVisible(css(`tr[data-cluster="beta"]`))); err != nil {
			t.Fatal(err)
		}
		shot(b, "clusters")
		who, err := chromedp.Run(b, chromedp.Text(css(`#who`)))
		if err != nil || who != "ada (admin)" {
			t.Errorf("signed in as %q (%v), want ada (admin)", who, err)
		}
		if n := count(b, "tr[data-cluster]"); n != 2 {
			t.Errorf("%d clusters listed, want 2", n)
		}
		if err := chromedp.Do(b, chromedp.Click(css(`tr[data-cluster="alpha"] a`)), chromedp.WaitVisible(css(`tr[data-node]`))); err != nil {
			t.Fatal(err)
		}
		shot(b, "cluster")
		if n := count(b, "tr[data-node]"); n != 2 {
			t.Errorf("alpha's page shows %d nodes, want 2", n)
		}
		if err := chromedp.Do(b, chromedp.Click(css(`#logout`)), chromedp.WaitVisible(css(`form.login`))); err != nil {
			t.Fatal(err)
		}
		// The session ended: the page, loaded again, asks for a login.
		if err := chromedp.Do(b, chromedp.Navigate(page), chromedp.WaitVisible(css(`form.login`))); err != nil {
			t.Fatal(err)
		}
	})

	// waitRows waits until n rows match sel, the page following the
	// cluster as it changes.
	waitRows := func(t *testing.T, b context.Context, sel string, n int) {
		t.Helper()
		expr := `document.querySelectorAll(` + strconv.Quote(sel) + `).length === ` + strconv.Itoa(n)
		if _, err := chromedp.Run(b, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(3*time.Minute))); err != nil {
			t.Fatalf("waiting for %d of %s: %v (now %d)", n, sel, err, count(b, sel))
		}
	}

	t.Run("an admin creates a 3+2 cluster with the form, scales it, removes a worker, takes a kubeconfig and deletes it", func(t *testing.T) {
		b := newBrowser(t)
		downloads := t.TempDir()
		if _, err := chromedp.CallBrowser(b, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: downloads}); err != nil {
			t.Fatal(err)
		}
		if err := logIn(b, "ada", password); err != nil {
			t.Fatal(err)
		}
		// The form with the keyboard alone: the focus starts in the name;
		// provider, image, version, masters (3) and workers (2) keep their
		// defaults; the VIP is one the API refuses.
		step(t, b, "create refused", chromedp.WaitVisible(css(`#create`)), chromedp.Click(css(`#create`)), chromedp.WaitVisible(css(`form.create`)),
			chromedp.KeyEvent("gamma"), chromedp.KeyEvent(strings.Repeat(kb.Tab, 6)), chromedp.KeyEvent("198.18.21.300"), chromedp.KeyEvent(kb.Enter),
			chromedp.WaitVisible(css(`#vip-error:not(:empty)`)))
		shot(b, "create-refused")
		if msg, err := chromedp.Run(b, chromedp.Text(css(`#vip-error`))); err != nil || !strings.Contains(msg, "198.18.21.300") {
			t.Errorf("the VIP's error says %q (%v), want the API's refusal of 198.18.21.300", msg, err)
		}
		// The focus went back to the refused field.
		step(t, b, "create", chromedp.KeyEvent(kb.End+erase+"198.18.21.52"+kb.Enter),
			chromedp.WaitVisible(css(`tr[data-node="gamma-w2"]`)))
		waitRows(t, b, `tr[data-node]`, 5)
		// Every VM provisioned, as the page shows it live.
		waitRows(t, b, `tr[data-node] td:nth-child(5)`, 5)
		if _, err := chromedp.Run(b, chromedp.Poll[bool](`[...document.querySelectorAll("tr[data-node] td:nth-child(5)")].every(td => td.textContent === "PoweredOn")`,
			chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(3*time.Minute))); err != nil {
			t.Fatalf("the page never showed every VM powered on: %v", err)
		}
		// The create operation, followed through the API's watch to its end.
		step(t, b, "the operation ends", chromedp.WaitVisible(css(`section.operation[data-state="Succeeded"]`)))
		shot(b, "created")

		step(t, b, "scale", chromedp.Click(css(`#scale`)), chromedp.WaitVisible(css(`dialog #f-workers`)),
			chromedp.SendKeys(css(`#f-workers`), kb.End+erase+"3"), chromedp.Click(css(`dialog #confirm`)))
		waitRows(t, b, `tr[data-node]`, 6)
		// The page redraws while the operation it follows has news; a
		// click lands once it is over.
		step(t, b, "the scale ends", chromedp.WaitVisible(css(`section.operation[data-state="Succeeded"]`)))

		step(t, b, "remove worker", chromedp.WaitVisible(css(`button[data-remove="gamma-w1"]`)), chromedp.Click(css(`button[data-remove="gamma-w1"]`)),
			chromedp.WaitVisible(css(`dialog #confirm`)), chromedp.Click(css(`dialog #confirm`)))
		waitRows(t, b, `tr[data-node="gamma-w1"]`, 0)
		step(t, b, "the removal ends", chromedp.WaitVisible(css(`section.operation[data-state="Succeeded"]`)))

		// A master's replacement is checked first too: without agents the
		// other masters are no healthy etcd members, and the dialog says so.
		step(t, b, "replace refused", chromedp.Click(css(`button[data-replace="gamma-m1"]`)), chromedp.WaitVisible(css(`dialog #f-freshDisk`)),
			chromedp.Click(css(`dialog #confirm`)), chromedp.WaitVisible(css(`dialog #form-error:not(:empty)`)))
		if msg, err := chromedp.Run(b, chromedp.Text(css(`dialog #form-error`))); err != nil || !strings.Contains(msg, "every other master must be a started, healthy etcd member while gamma-m1 is replaced") {
			t.Errorf("the refused replacement says %q (%v), want that the other masters must be healthy", msg, err)
		}
		step(t, b, "replace cancelled", chromedp.Click(css(`dialog #cancel`)), chromedp.WaitNotPresent(css(`dialog`)))

		// An upgrade is checked first: these VMs run no agent, so their
		// nodes are not Ready, and the dialog says the API's refusal.
		step(t, b, "upgrade refused", chromedp.Click(css(`#upgrade`)), chromedp.WaitVisible(css(`dialog #f-image`)), chromedp.Click(css(`dialog #confirm`)),
			chromedp.WaitVisible(css(`dialog .field-error:not(:empty)`)))
		shot(b, "upgrade-refused")
		step(t, b, "upgrade cancelled", chromedp.Click(css(`dialog #cancel`)), chromedp.WaitNotPresent(css(`dialog`)))

		// Etcd: a row per master and one for the controller's copies, none
		// yet. Without agents, a snapshot and a restore are refused, and the
		// dialog says why; a restore first wants the cluster's name typed.
		waitRows(t, b, `tr[data-snapshots]`, 4)
		step(t, b, "snapshot refused", chromedp.Click(css(`#etcd-snapshot`)), chromedp.WaitVisible(css(`dialog #confirm`)), chromedp.Click(css(`dialog #confirm`)),
			chromedp.WaitVisible(css(`dialog #form-error:not(:empty)`)))
		if msg, err := chromedp.Run(b, chromedp.Text(css(`dialog #form-error`))); err != nil || !strings.Contains(msg, "reports") {
			t.Errorf("the refused snapshot says %q (%v), want that no master reports etcd snapshots", msg, err)
		}
		step(t, b, "snapshot cancelled", chromedp.Click(css(`dialog #cancel`)), chromedp.WaitNotPresent(css(`dialog`)))
		step(t, b, "restore unconfirmed", chromedp.Click(css(`#restore`)), chromedp.WaitVisible(css(`dialog #f-snapshot`)), chromedp.Click(css(`dialog #confirm`)),
			chromedp.WaitVisible(css(`dialog #confirmName-error:not(:empty)`)))
		step(t, b, "restore refused", chromedp.SendKeys(css(`dialog #f-confirmName`), "gamma"), chromedp.Click(css(`dialog #confirm`)),
			chromedp.WaitVisible(css(`dialog #form-error:not(:empty)`)))
		shot(b, "restore-refused")
		if msg, err := chromedp.Run(b, chromedp.Text(css(`dialog #form-error`))); err != nil || !strings.Contains(msg, "etcd.restore") {
			t.Errorf("the refused restore says %q (%v), want that the masters' agents do not report etcd restores", msg, err)
		}
		step(t, b, "restore cancelled", chromedp.Click(css(`dialog #cancel`)), chromedp.WaitNotPresent(css(`dialog`)))

		// Both kubeconfigs: the admin one with a certificate of its own,
		// the user's one with harmonyctl as its credential plugin.
		downloaded := func(file string, want ...string) {
			t.Helper()
			deadline := time.Now().Add(time.Minute)
			for {
				data, err := os.ReadFile(filepath.Join(downloads, file))
				missing := err != nil
				for _, w := range want {
					missing = missing || !strings.Contains(string(data), w)
				}
				if !missing {
					return
				}
				if time.Now().After(deadline) {
					text, _ := chromedp.Run(b, chromedp.Evaluate[string](`document.body.innerText`))
					t.Fatalf("no %s with %q downloaded: %v %q\npage:\n%s", file, want, err, data, text)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		step(t, b, "admin kubeconfig", chromedp.Click(css(`#admin-kubeconfig`)))
		downloaded("gamma-admin.kubeconfig", "kind: Config", "198.18.21.52", "client-certificate-data")
		step(t, b, "kubeconfig", chromedp.Click(css(`#kubeconfig`)))
		downloaded("gamma.kubeconfig", "kind: Config", "198.18.21.52", "command: harmonyctl", "- credential")

		// Delete asks for the name first.
		step(t, b, "delete mistyped", chromedp.Click(css(`#delete`)), chromedp.WaitVisible(css(`dialog #f-confirmName`)),
			chromedp.SendKeys(css(`#f-confirmName`), "gama"), chromedp.Click(css(`dialog #confirm`)), chromedp.WaitVisible(css(`#confirmName-error:not(:empty)`)))
		if _, err := admin.Cluster(ctx, "gamma"); err != nil {
			t.Fatalf("a mistyped confirmation deleted the cluster: %v", err)
		}
		step(t, b, "delete", chromedp.SendKeys(css(`#f-confirmName`), kb.End+erase+"gamma"), chromedp.Click(css(`dialog #confirm`)),
			chromedp.WaitVisible(css(`tr[data-cluster="alpha"]`)))
		deadline := time.Now().Add(3 * time.Minute)
		for {
			if _, err := admin.Cluster(ctx, "gamma"); err != nil && strings.Contains(err.Error(), "not found") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("gamma was not deleted")
			}
			time.Sleep(time.Second)
		}
	})

	t.Run("an admin's pages: providers without the password, images, users, grants and the audit log", func(t *testing.T) {
		b := newBrowser(t)
		if err := logIn(b, "ada", password); err != nil {
			t.Fatal(err)
		}
		step(t, b, "providers", chromedp.WaitVisible(css(`#admin-links a[href="#/providers"]`)), chromedp.Click(css(`#admin-links a[href="#/providers"]`)),
			chromedp.WaitVisible(css(`tr[data-provider="lab"]`)))
		shot(b, "providers")
		if html, err := chromedp.Run(b, chromedp.Evaluate[string](`document.documentElement.outerHTML`)); err != nil || strings.Contains(html, sim.Password) {
			t.Errorf("the providers page holds the vCenter password (%v)", err)
		}
		step(t, b, "images", chromedp.Click(css(`#admin-links a[href="#/images"]`)), chromedp.WaitVisible(css(`tr[data-image="harmony-node-2-0-0"]`)))
		shot(b, "images")
		if text, err := chromedp.Run(b, chromedp.Text(css(`tr[data-image="harmony-node-2-0-0"]`))); err != nil || !strings.Contains(text, "Ready") || !strings.Contains(text, "v1.34") {
			t.Errorf("the image's row says %q (%v), want Ready and its Kubernetes versions", text, err)
		}
		// gamma, deleted above without purge, left its data disks: purged
		// only once its id is typed.
		left, err := admin.Leftovers(ctx)
		if err != nil || len(left) != 1 || left[0].Cluster != "gamma" {
			t.Fatalf("leftovers after gamma's delete: %+v, %v", left, err)
		}
		row := fmt.Sprintf(`tr[data-leftovers=%q]`, left[0].ID)
		step(t, b, "leftovers", chromedp.Click(css(`#admin-links a[href="#/leftovers"]`)), chromedp.WaitVisible(css(row)))
		if text, err := chromedp.Run(b, chromedp.Text(css(row))); err != nil || !strings.Contains(text, left[0].DataDiskFolders[0]) {
			t.Errorf("gamma's leftovers row says %q (%v), want its folder %s", text, err, left[0].DataDiskFolders[0])
		}
		shot(b, "leftovers")
		step(t, b, "purge mistyped", chromedp.Click(css(row+` button[data-purge]`)), chromedp.WaitVisible(css(`dialog #f-confirmName`)),
			chromedp.SendKeys(css(`#f-confirmName`), "gamma"), chromedp.Click(css(`dialog #confirm`)), chromedp.WaitVisible(css(`#confirmName-error:not(:empty)`)))
		if left, err := admin.Leftovers(ctx); err != nil || len(left) != 1 {
			t.Fatalf("a mistyped confirmation purged: %+v, %v", left, err)
		}
		step(t, b, "purge", chromedp.SendKeys(css(`#f-confirmName`), kb.End+erase+left[0].ID), chromedp.Click(css(`dialog #confirm`)),
			chromedp.WaitVisible(css(`main p.empty`)))
		if left, err := admin.Leftovers(ctx); err != nil || len(left) != 0 {
			t.Errorf("leftovers after the purge: %+v, %v", left, err)
		}
		step(t, b, "add a user", chromedp.Click(css(`#admin-links a[href="#/users"]`)), chromedp.WaitVisible(css(`#add-user`)), chromedp.Click(css(`#add-user`)),
			chromedp.WaitVisible(css(`dialog #f-name`)), chromedp.SendKeys(css(`#f-name`), "gus"), chromedp.SendKeys(css(`#f-password`), password),
			chromedp.Click(css(`dialog #confirm`)), chromedp.WaitVisible(css(`tr[data-user="gus"]`)))
		shot(b, "users")
		// beta has one master: a fresh disk for it would found a new,
		// empty etcd, and the refusal is shown next to the checkbox.
		step(t, b, "fresh disk refused", chromedp.Navigate(page+"#/clusters/beta"), chromedp.WaitVisible(css(`button[data-replace="beta-m1"]`)),
			chromedp.Click(css(`button[data-replace="beta-m1"]`)), chromedp.WaitVisible(css(`dialog #f-freshDisk`)), chromedp.Click(css(`dialog #f-freshDisk`)),
			chromedp.Click(css(`dialog #confirm`)), chromedp.WaitVisible(css(`dialog #freshDisk-error:not(:empty)`)))
		if msg, err := chromedp.Run(b, chromedp.Text(css(`dialog #freshDisk-error`))); err != nil || !strings.Contains(msg, "data would be lost") {
			t.Errorf("the refused fresh disk says %q (%v), want that etcd's data would be lost", msg, err)
		}
		step(t, b, "fresh disk cancelled", chromedp.Click(css(`dialog #cancel`)), chromedp.WaitNotPresent(css(`dialog`)))
		step(t, b, "grant", chromedp.WaitVisible(css(`#grant`)), chromedp.Click(css(`#grant`)),
			chromedp.WaitVisible(css(`dialog #f-subject`)), chromedp.SendKeys(css(`#f-subject`), "gus"), chromedp.Click(css(`dialog #confirm`)),
			chromedp.WaitVisible(css(`tr[data-grant="user/gus"]`)))
		gus := newBrowser(t)
		if err := logIn(gus, "gus", password); err != nil {
			t.Fatal(err)
		}
		step(t, gus, "gus sees beta", chromedp.WaitVisible(css(`tr[data-cluster="beta"]`)))
		if n := count(gus, "tr[data-cluster]"); n != 1 {
			t.Errorf("gus, granted beta, sees %d clusters", n)
		}
		step(t, b, "revoke", chromedp.Click(css(`button[data-revoke="user/gus"]`)), chromedp.WaitVisible(css(`dialog #confirm`)), chromedp.Click(css(`dialog #confirm`)),
			chromedp.WaitNotPresent(css(`tr[data-grant="user/gus"]`)))
		step(t, gus, "gus sees nothing", chromedp.Navigate(page), chromedp.WaitVisible(css(`p.empty`)))
		// Disabled, gus is signed out: his next page asks for a login.
		step(t, b, "disable gus", chromedp.Click(css(`#admin-links a[href="#/users"]`)), chromedp.WaitVisible(css(`button[data-edit-user="gus"]`)),
			chromedp.Click(css(`button[data-edit-user="gus"]`)), chromedp.WaitVisible(css(`dialog #f-disabled`)), chromedp.Click(css(`dialog #f-disabled`)),
			chromedp.Click(css(`dialog #confirm`)), chromedp.WaitNotPresent(css(`dialog`)))
		if _, err := chromedp.Run(b, chromedp.Poll[bool](`document.querySelector('tr[data-user="gus"]')?.textContent.includes("yes")`,
			chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			t.Errorf("the users page never showed gus disabled: %v", err)
		}
		step(t, gus, "gus signed out", chromedp.Navigate(page), chromedp.WaitVisible(css(`form.login`)))

		// The directory settings: a malformed URL is refused next to its
		// field; a directory that does not answer is the controller's
		// failure (503), said as such, and the form keeps what was typed.
		step(t, b, "ldap page", chromedp.Click(css(`#admin-links a[href="#/ldap"]`)), chromedp.WaitVisible(css(`form.ldap`)),
			chromedp.SendKeys(css(`#f-url`), "http://directory.example"), chromedp.SendKeys(css(`#f-bindDN`), "cn=harmony,dc=example"),
			chromedp.SendKeys(css(`#f-bindPassword`), "a directory password"), chromedp.SendKeys(css(`#f-userSearch-baseDN`), "ou=people,dc=example"),
			chromedp.SendKeys(css(`#f-userSearch-filter`), "(uid={username})"), chromedp.SendKeys(css(`#f-groupSearch-baseDN`), "ou=groups,dc=example"),
			chromedp.Click(css(`#ldap-apply`)), chromedp.WaitVisible(css(`#url-error:not(:empty)`)))
		// A port nothing listens on: the listener is closed before use.
		closed, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		deadURL := "ldaps://" + closed.Addr().String()
		closed.Close()
		step(t, b, "ldap unreachable", chromedp.SendKeys(css(`#f-url`), kb.End+strings.Repeat(kb.Backspace, 30)+deadURL), chromedp.Click(css(`#ldap-apply`)),
			chromedp.WaitVisible(css(`#message:not([hidden])`)))
		shot(b, "ldap-unreachable")
		if msg, err := chromedp.Run(b, chromedp.Text(css(`#message`))); err != nil || !strings.Contains(msg, "HTTP 503") || !strings.Contains(msg, v1.CodeLDAPUnreachable) {
			t.Errorf("the message for an unreachable directory is %q (%v), want the controller's 503 and its code", msg, err)
		}
		if url, err := chromedp.Run(b, chromedp.Value(css(`#f-url`))); err != nil || url != deadURL {
			t.Errorf("after the failure the URL field holds %q (%v), want what was typed", url, err)
		}
		step(t, b, "audit", chromedp.Click(css(`#admin-links a[href="#/audit"]`)), chromedp.WaitVisible(css(`table[aria-label="Audit log"]`)))
		shot(b, "audit")
		if text, err := chromedp.Run(b, chromedp.Text(css(`main`))); err != nil || !strings.Contains(text, "/grants/user/gus") {
			t.Errorf("the audit log lacks the revocation (%v)", err)
		}
	})

	t.Run("a user granted one cluster sees only it, and no create, scale or delete", func(t *testing.T) {
		b := newBrowser(t)
		if err := logIn(b, "uma", password); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(b, chromedp.WaitVisible(css(`tr[data-cluster]`))); err != nil {
			t.Fatal(err)
		}
		names, err := chromedp.Run(b, chromedp.Evaluate[[]string](`[...document.querySelectorAll("tr[data-cluster]")].map(r => r.dataset.cluster)`))
		if err != nil || strings.Join(names, ",") != "alpha" {
			t.Errorf("uma sees %v (%v), want [alpha]", names, err)
		}
		if n := count(b, "#create"); n != 0 {
			t.Error("uma is offered to create a cluster")
		}
		if err := chromedp.Do(b, chromedp.Click(css(`tr[data-cluster="alpha"] a`)), chromedp.WaitVisible(css(`tr[data-node]`))); err != nil {
			t.Fatal(err)
		}
		shot(b, "cluster-viewer")
		if n := count(b, "#scale, #delete, #upgrade, #retry, button[data-remove], button[data-replace], #admin-kubeconfig, #grant, #etcd-snapshot, #restore"); n != 0 {
			t.Errorf("uma, who may only view alpha, is offered %d changes", n)
		}
		if n := count(b, "#kubeconfig"); n != 1 {
			t.Error("uma is not offered her own kubeconfig")
		}
	})

	t.Run("a user granted nothing sees an empty list", func(t *testing.T) {
		b := newBrowser(t)
		if err := logIn(b, "nia", password); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(b, chromedp.WaitVisible(css(`p.empty`))); err != nil {
			t.Fatal(err)
		}
		if n := count(b, "tr[data-cluster]"); n != 0 {
			t.Errorf("nia sees %d clusters", n)
		}
	})
}

func rootsOf(ca *x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca)
	return p
}

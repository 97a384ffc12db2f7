package testcluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/internal/testenv"
)

// moduleRoot is where the install steps' relative paths (bin/logagent,
// config/agent.hcl, ...) start: the tests run in internal/testcluster.
const moduleRoot = "../.."

// TestInstallAsDocumented runs docs/operations.md's install steps as
// written, as root: the commands of the "## Install" section's sh block are
// read from the document and executed (the binary under test in place of
// bin/logagent), the configuration gets the edit the steps ask for, and
// what `systemctl enable --now` would do is done from the installed unit's
// own lines: its StateDirectory, then ExecStartPre and ExecStart as its
// User and Group (setpriv, as systemd's User= does), with NOTIFY_SOCKET for
// Type=notify. The agent must validate, start, say READY=1 and serve; then
// systemd-analyze verify checks the installed unit. Everything the steps
// created, the user included, is removed afterwards. It refuses to run
// over an existing install.
func TestInstallAsDocumented(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipUnlessCI(t, "!!! NOT ROOT: %s IS SKIPPED; it installs into /usr/bin, /etc and /var/lib and creates a user, as docs/operations.md says: CI runs it as root", t.Name())
	}
	// The steps' tools, setpriv for User=, and the unit's ExecReload's
	// /bin/kill (Debian's procps, which `make systemd` installs).
	for _, tool := range []string{"install", "useradd", "userdel", "setpriv", "/bin/kill"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the install steps need %s: %v", tool, err)
		}
	}
	bin := Binary(t)
	steps := installSteps(t, filepath.Join(moduleRoot, "docs/operations.md"))
	inst := &installer{t: t, bin: bin}
	t.Cleanup(inst.undo)
	for _, step := range steps {
		inst.run(step)
	}
	if !inst.enabled {
		t.Fatalf("the install steps never start the unit (systemctl enable --now logagent): %q", steps)
	}

	unitPath := "/etc/systemd/system/logagent.service"
	unit := parseUnit(t, unitPath)
	cfgPath := "/etc/logagent.d/agent.hcl"
	consul := consultest.Start(t)
	ports := consultest.FreePorts(t, 2)
	clientAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	// The edit the step installing agent.hcl asks for: node_id, peer, consul
	// (and the client port, free on this machine), written in place so the
	// file keeps the owner and mode the step gave it.
	editFile(t, cfgPath, map[string]string{
		`# node_id = "host-1"`:            `node_id = "install-1"`,
		`address = "127.0.0.1:7070"`:      fmt.Sprintf("address = %q", clientAddr),
		`address = "0.0.0.0:7171"`:        fmt.Sprintf(`address = "127.0.0.1:%d"`, ports[1]),
		`# address    = "127.0.0.1:8500"`: fmt.Sprintf("address = %q", consul.HTTPAddr()),
	})
	checkMode(t, "/etc/logagent.d", fs.ModeDir|0o750, "root", unit.get("Group"))
	checkMode(t, cfgPath, 0o640, "root", unit.get("Group"))

	u, err := user.Lookup(unit.get("User"))
	if err != nil {
		t.Fatalf("the unit's User=%s: %v", unit.get("User"), err)
	}
	g, err := user.LookupGroup(unit.get("Group"))
	if err != nil {
		t.Fatalf("the unit's Group=%s: %v", unit.get("Group"), err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(g.Gid)

	// StateDirectory=: systemd creates /var/lib/<name>, owned by User and
	// Group, with StateDirectoryMode.
	stateDir := filepath.Join("/var/lib", unit.get("StateDirectory"))
	mode, err := strconv.ParseUint(unit.get("StateDirectoryMode"), 8, 32)
	if err != nil {
		t.Fatalf("StateDirectoryMode=%q: %v", unit.get("StateDirectoryMode"), err)
	}
	inst.create(stateDir)
	if err := os.Mkdir(stateDir, os.FileMode(mode)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(stateDir, uid, gid); err != nil {
		t.Fatal(err)
	}

	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + u.HomeDir, "USER=" + u.Username}
	for _, f := range unit.all("EnvironmentFile") {
		env = append(env, readEnvFile(t, f)...)
	}
	asUser := func(line string) *exec.Cmd {
		// --pdeathsig after the user change (the kernel clears a parent
		// death signal set before it): a test that times out runs no
		// defers, and the agent would outlive it.
		argv := append([]string{"setpriv", "--reuid=" + u.Uid, "--regid=" + g.Gid, "--init-groups", "--pdeathsig=KILL", "--"}, strings.Fields(line)...)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		cmd.Dir = "/"
		return cmd
	}

	for _, line := range unit.all("ExecStartPre") {
		out, err := asUser(line).CombinedOutput()
		if err != nil {
			t.Fatalf("ExecStartPre %s as %s: %v\n%s", line, u.Username, err, out)
		}
		t.Logf("ExecStartPre as %s: %s", u.Username, bytes.TrimSpace(out))
	}

	// The document's validation before a restart, as the agent's user:
	// each runuser line, up to its &&.
	validations := 0
	doc, err := os.ReadFile(filepath.Join(moduleRoot, "docs/operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "runuser ") {
			continue
		}
		command, _, _ := strings.Cut(line, "&&")
		out, err := exec.Command("sh", "-c", command).CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("configuration valid")) {
			t.Fatalf("docs/operations.md's %q: %v\n%s", command, err, out)
		}
		validations++
	}
	if validations == 0 {
		t.Fatal("docs/operations.md validates before a restart with no runuser line any more: update the test")
	}

	if unit.get("Type") != "notify" {
		t.Fatalf("Type=%s: the test waits for READY=1", unit.get("Type"))
	}
	notifyDir, err := os.MkdirTemp("", "logagent-install-notify-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(notifyDir) })
	sock := filepath.Join(notifyDir, "notify.sock")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	// The agent's user must reach the socket, as systemd's is reachable.
	if err := os.Chmod(notifyDir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}

	if len(unit.all("ExecStart")) != 1 {
		t.Fatalf("ExecStart=%q: want one", unit.all("ExecStart"))
	}
	agent := asUser(unit.get("ExecStart"))
	agent.Env = append(agent.Env, "NOTIFY_SOCKET="+sock)
	logPath := filepath.Join(t.TempDir(), "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	agent.Stdout, agent.Stderr = logFile, logFile
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			agent.Process.Kill()
			<-exited
		}
	}()
	failf := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nagent log:\n%s", append(args, tail(logPath, logTailBytes))...)
	}

	ready := make(chan string, 1)
	go func() {
		buf := make([]byte, 256)
		notify.SetReadDeadline(time.Now().Add(healthyTimeout))
		n, _, err := notify.ReadFromUnix(buf)
		if err != nil {
			ready <- err.Error()
			return
		}
		ready <- string(buf[:n])
	}()
	select {
	case got := <-ready:
		if got != "READY=1" {
			failf("first notification %q, want READY=1", got)
		}
	case err := <-exited:
		stopped = true
		failf("the agent exited before READY=1: %v", err)
	}

	hc := &http.Client{Timeout: 10 * time.Second}
	call := func(method, path, contentType, accept, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+clientAddr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := hc.Do(req)
		if err != nil {
			failf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, body := call("GET", "/v1/health", "", "", ""); code != 200 || !strings.Contains(body, `"node_id":"install-1"`) {
		failf("health: %d %s", code, body)
	}
	if code, body := call("POST", "/v1/topics", "application/json", "", `{"name":"installed","partitions":1,"replication_factor":1,"min_insync_replicas":1}`); code != 201 {
		failf("create topic: %d %s", code, body)
	}
	if code, body := call("POST", "/v1/topics/installed/records?partition=0", "application/x-ndjson", "", "it runs\n"); code != 200 {
		failf("produce: %d %s", code, body)
	}
	code, body := call("GET", "/v1/topics/installed/partitions/0/records?offset=0", "", "application/x-ndjson", "")
	var rec struct {
		Offset int64  `json:"offset"`
		Value  string `json:"value"`
	}
	if code != 200 || json.Unmarshal([]byte(strings.TrimSpace(body)), &rec) != nil || rec.Value != "it runs" {
		failf("fetch: %d %s", code, body)
	}
	// The agent wrote its data directory as the unit's user.
	if st, err := os.Stat(filepath.Join(stateDir, "meta.json")); err != nil {
		failf("meta.json: %v", err)
	} else if owner := st.Sys().(*syscall.Stat_t).Uid; int(owner) != uid {
		failf("meta.json is owned by uid %d, not %s's %d", owner, u.Username, uid)
	}

	// systemctl reload: the ExecReload= lines in turn, as the unit's user,
	// stopping at the first that fails. A valid configuration reloads; a
	// broken file fails the reload before any SIGHUP, and the agent serves on.
	reload := func() error {
		t.Helper()
		for _, line := range unit.all("ExecReload") {
			line = strings.ReplaceAll(line, "$MAINPID", strconv.Itoa(agent.Process.Pid))
			if out, err := asUser(line).CombinedOutput(); err != nil {
				return fmt.Errorf("ExecReload %s: %w\n%s", line, err, out)
			}
		}
		return nil
	}
	if err := reload(); err != nil {
		failf("reload of the installed configuration: %v", err)
	}
	broken := "/etc/logagent.d/zz-broken.hcl"
	inst.create(broken)
	if err := os.WriteFile(broken, []byte("log_level = \"loud\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := reload(); err == nil || !strings.Contains(err.Error(), "validate") {
		failf("a reload of a broken file did not fail at its validate: %v", err)
	}
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	if code, body := call("GET", "/v1/health", "", "", ""); code != 200 {
		failf("health after the reloads: %d %s", code, body)
	}

	// KillSignal=, then TimeoutStopSec= at most.
	if sig := unit.get("KillSignal"); sig != "SIGTERM" {
		t.Fatalf("KillSignal=%s: the test sends SIGTERM", sig)
	}
	stopTimeout, err := time.ParseDuration(unit.get("TimeoutStopSec"))
	if err != nil {
		t.Fatalf("TimeoutStopSec=%q: %v", unit.get("TimeoutStopSec"), err)
	}
	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			failf("the agent's stop: %v", err)
		}
	case <-time.After(stopTimeout):
		failf("the agent did not stop within TimeoutStopSec=%s", stopTimeout)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "clean_shutdown")); err != nil {
		failf("no clean_shutdown after the stop: %v", err)
	}

	t.Run("systemd-analyze verify", func(t *testing.T) {
		if _, err := exec.LookPath("systemd-analyze"); err != nil {
			testenv.SkipUnlessCI(t, "!!! NO systemd-analyze: %s IS SKIPPED; install it as root with `make systemd` (apt-get install systemd)", t.Name())
		}
		out, err := exec.Command("systemd-analyze", "verify", unitPath).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Fatalf("systemd-analyze verify %s: %v\n%s", unitPath, err, out)
		}
	})
}

// installSteps reads the commands of the sh block of the "## Install"
// section: one command a line, comments cut off.
func installSteps(t *testing.T, doc string) []string {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	section, block := false, false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			if section && len(steps) > 0 {
				return steps
			}
			section = line == "## Install"
		case section && strings.HasPrefix(line, "```"):
			if block {
				return steps
			}
			block = line == "```sh"
		case section && block:
			if i := strings.Index(line, " #"); i >= 0 {
				line = line[:i]
			}
			if line = strings.TrimSpace(line); line != "" {
				steps = append(steps, line)
			}
		}
	}
	t.Fatalf("%s: no sh block in its \"## Install\" section", doc)
	return nil
}

// installer runs install steps and remembers what they created, to remove
// it again.
type installer struct {
	t       *testing.T
	bin     string
	created []string // paths, in the order they appeared
	users   []string
	enabled bool
}

func (in *installer) run(step string) {
	t := in.t
	t.Helper()
	for _, command := range strings.Split(step, "&&") {
		args := strings.Fields(command)
		switch {
		case len(args) == 2 && args[0] == "make" && args[1] == "build":
			// The binary under test is what make build built.
		case args[0] == "install":
			in.install(args)
		case args[0] == "useradd":
			name := args[len(args)-1]
			if _, err := user.Lookup(name); err == nil {
				t.Fatalf("user %s exists already: refusing to run the install steps over an existing install", name)
			}
			in.exec(args)
			in.users = append(in.users, name)
		case len(args) == 2 && args[0] == "systemctl" && args[1] == "daemon-reload":
			// The test reads the unit file itself.
		case len(args) == 4 && args[0] == "systemctl" && args[1] == "enable" && args[2] == "--now" && args[3] == "logagent":
			in.enabled = true
		default:
			t.Fatalf("install step %q: the test does not know how to run %q; teach it", step, command)
		}
	}
}

// install runs install(1) with the binary under test for bin/logagent,
// refusing to overwrite anything.
func (in *installer) install(args []string) {
	t := in.t
	t.Helper()
	for i, a := range args {
		if a == "bin/logagent" {
			args[i] = in.bin
		}
	}
	dest := args[len(args)-1]
	if !filepath.IsAbs(dest) {
		t.Fatalf("install %q: the destination is not absolute", args)
	}
	if _, err := os.Lstat(dest); err == nil {
		t.Fatalf("%s exists already: refusing to run the install steps over an existing install", dest)
	}
	in.create(dest)
	in.exec(args)
}

// create records path and its parents that do not exist yet.
func (in *installer) create(path string) {
	var missing []string
	for p := path; p != "/"; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		in.created = append(in.created, missing[i])
	}
}

func (in *installer) exec(args []string) {
	in.t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = moduleRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		in.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// undo removes what the steps created, newest first, then the users.
func (in *installer) undo() {
	for i := len(in.created) - 1; i >= 0; i-- {
		if err := os.RemoveAll(in.created[i]); err != nil {
			in.t.Errorf("cleanup: %v", err)
		}
	}
	for _, name := range in.users {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			in.t.Errorf("cleanup: userdel %s: %v\n%s", name, err, out)
		}
		// userdel removes the user's own group only where USERGROUPS_ENAB
		// says so.
		if _, err := user.LookupGroup(name); err == nil {
			if out, err := exec.Command("groupdel", name).CombinedOutput(); err != nil {
				in.t.Errorf("cleanup: groupdel %s: %v\n%s", name, err, out)
			}
		}
	}
}

// unitFile is a systemd unit's [Service] settings, in order.
type unitFile struct {
	t        *testing.T
	settings map[string][]string
}

func parseUnit(t *testing.T, path string) unitFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unitFile{t: t, settings: map[string][]string{}}
	service := false
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			service = line == "[Service]"
		case service:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: %q is no setting", path, line)
			}
			u.settings[k] = append(u.settings[k], v)
		}
	}
	return u
}

// get is a setting the unit must have once.
func (u unitFile) get(key string) string {
	u.t.Helper()
	if v := u.settings[key]; len(v) != 1 {
		u.t.Fatalf("unit setting %s=%q: want exactly one", key, v)
	}
	return u.settings[key][0]
}

func (u unitFile) all(key string) []string { return u.settings[key] }

// readEnvFile reads an EnvironmentFile= (a leading '-': it may be absent).
func readEnvFile(t *testing.T, path string) []string {
	t.Helper()
	optional := strings.HasPrefix(path, "-")
	path = strings.TrimPrefix(path, "-")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && optional {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			env = append(env, line)
		}
	}
	return env
}

// editFile replaces each key, a whole trimmed line that must occur exactly
// once, by its value (keeping the indentation), in place.
func editFile(t *testing.T, path string, edits map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for from, to := range edits {
		n := 0
		for i, line := range lines {
			if strings.TrimSpace(line) == from {
				lines[i] = line[:len(line)-len(strings.TrimLeft(line, " "))] + to
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%s: the line %q occurs %d times, want once: the edit no longer fits the file", path, from, n)
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0); err != nil {
		t.Fatal(err)
	}
}

// checkMode checks a path's mode and owners.
func checkMode(t *testing.T, path string, mode fs.FileMode, owner, group string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	u, err := user.LookupId(strconv.Itoa(int(sys.Uid)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := user.LookupGroupId(strconv.Itoa(int(sys.Gid)))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode() != mode || u.Username != owner || g.Name != group {
		t.Errorf("%s is %s %s:%s, want %s %s:%s", path, st.Mode(), u.Username, g.Name, mode, owner, group)
	}
}

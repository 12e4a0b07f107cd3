// Package clitest checks a built egressflow command's command line against
// what cmd/internal/cli promises: Kubernetes components' flags and logging.
// It is for the commands' tests only.
package clitest

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// legacyKlogFlags are klog's flags that Kubernetes components dropped
// (KEP-2845), as klog.InitFlags registers them.
var legacyKlogFlags = []string{
	"--logtostderr", "--alsologtostderr", "--log_dir=/tmp", "--log_file=/tmp/x.log",
	"--log_file_max_size=1", "--skip_headers", "--skip_log_headers", "--add_dir_header",
	"--one_output", "--stderrthreshold=0", "--log_backtrace_at=main.go:1",
}

// CheckFlags runs bin, the command name built with version (see
// proc.BuildVersion), and checks that:
//   - --version prints "<name> <version>" and exits 0;
//   - --logging-format=json makes every line it logs a JSON object, and
//     the text format does not;
//   - -v, as shorthand or long flag, is accepted;
//   - klog's legacy flags and single-dash long flags are refused.
//
// failing are arguments with which the command logs an error and exits
// non-zero at once, without a cluster or a switch (e.g. a malformed CIDR
// flag), and logged is the message of that log line.
func CheckFlags(t *testing.T, bin, name, version string, failing []string, logged string) {
	t.Helper()
	run := func(args ...string) (stdout, stderr string, err error) {
		var out, errOut bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		return out.String(), errOut.String(), err
	}
	exitCode := func(err error) int {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		if err != nil {
			t.Fatalf("run %s: %v", bin, err)
		}
		return 0
	}

	t.Run("Version", func(t *testing.T) {
		for _, args := range [][]string{{"--version"}, {"-v=2", "--version"}, {"--v=2", "--version"}, {"-v", "2", "--version"}} {
			out, errOut, err := run(args...)
			if want := name + " " + version + "\n"; out != want || exitCode(err) != 0 {
				t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want exit 0 and %q", name, strings.Join(args, " "), exitCode(err), out, errOut, want)
			}
		}
	})

	t.Run("JSONLogging", func(t *testing.T) {
		_, errOut, err := run(append([]string{"--logging-format=json"}, failing...)...)
		if exitCode(err) == 0 {
			t.Fatalf("%s %s: exit 0, want a failure", name, strings.Join(failing, " "))
		}
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		found := false
		for _, line := range lines {
			var entry map[string]any
			if err := json.Unmarshal([]byte(line), &entry); err != nil {
				t.Errorf("with --logging-format=json, a log line that is not a JSON object (%v): %s", err, line)
				continue
			}
			if _, ok := entry["ts"]; !ok {
				t.Errorf("JSON log line without a timestamp: %s", line)
			}
			if entry["msg"] == logged {
				found = true
				if e, _ := entry["err"].(string); e == "" {
					t.Errorf("JSON log line of the failure without its error: %s", line)
				}
			}
		}
		if !found {
			t.Errorf("with --logging-format=json, no line with msg %q in:\n%s", logged, errOut)
		}
		// The default, text, is not JSON: the flag made the difference.
		_, errOut, _ = run(failing...)
		if !strings.Contains(errOut, `"`+logged+`"`) || strings.HasPrefix(strings.TrimSpace(errOut), "{") {
			t.Errorf("by default, want klog's text format logging %q:\n%s", logged, errOut)
		}
	})

	t.Run("LegacyFlagsRefused", func(t *testing.T) {
		for _, legacy := range legacyKlogFlags {
			out, errOut, err := run(legacy, "--version")
			if exitCode(err) == 0 || out != "" || !strings.Contains(errOut, "unknown flag") {
				t.Errorf("%s %s --version: exit %d, stdout %q, stderr %q; want it refused as an unknown flag", name, legacy, exitCode(err), out, errOut)
			}
		}
		// Go's flag package took -name for --name; pflag reads -name as
		// shorthands, and these commands have only -v.
		for _, singleDash := range []string{"-kubeconfig=/dev/null", "-version"} {
			out, errOut, err := run(singleDash)
			if exitCode(err) == 0 || out != "" {
				t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want it refused", name, singleDash, exitCode(err), out, errOut)
			}
		}
	})
}

// Command testapp is the workload of the cluster in Docker
// (test/dockercluster), in two images built FROM scratch:
//
//   - `testapp pause` is the pods' sandbox (the kubelet's pause image): it
//     sleeps until SIGTERM or SIGINT and reaps orphaned children.
//   - `testapp sleep DURATION` waits that long: an init container that
//     makes a pod start late, as a slow image pull would.
//   - `testapp probe TARGET...` is a test pod: every --interval it sends a
//     UDP datagram to each TARGET (host:port) and reads the answer, which
//     the test's source server (topology.SourceServer) makes the source
//     address it saw. It logs a line per target whenever that source
//     changes, and every --report interval, so a test reads in the pod's log
//     (kubectl logs) what the outside saw of this very pod; with --flows N,
//     over N flows per target kept for the pod's life, each logged apart.
//     (The log, not
//     a port of the pod: an endpoint's answers to a client outside the
//     cluster would leave SNATed, which is the point.)
//   - `testapp dnswindow SERVER NAME COUNT PORT` looks NAME's A record up
//     at SERVER over UDP COUNT times and, the moment each answer arrives,
//     sends a UDP datagram to its first address on PORT: a client that
//     connects as soon as it has an address (dnswindow.go).
//   - `testapp dnsforward UPSTREAM` is a DNS resolver pod: it forwards each
//     UDP query on port 53 to UPSTREAM and relays the reply, as CoreDNS's
//     forward plugin does without its cache (dnsforward.go).
//   - `testapp redirect --address ADDR PROTO/PORT=DEST:PORT...` is the
//     reference's egress router pod: nftables DNAT and SNAT from a reserved
//     address it puts on the node's uplink bridge (redirect.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testapp pause | sleep DURATION | probe [--interval D] [--report D] [--flows N] TARGET... | dnswindow [flags] SERVER NAME COUNT PORT | dnsforward [--listen ADDR] UPSTREAM | redirect [flags] PROTO/PORT=DEST:PORT...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "pause":
		pause()
	case "sleep":
		err = sleep(os.Args[2:])
	case "probe":
		err = probe(os.Args[2:])
	case "dnswindow":
		err = dnsWindow(os.Args[2:])
	case "dnsforward":
		err = dnsForward(os.Args[2:])
	case "redirect":
		err = redirect(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		os.Exit(1)
	}
}

// pause waits for a termination signal, reaping children meanwhile (it is
// PID 1 of the pod's sandbox).
func pause() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var status syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}

func sleep(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("sleep takes one duration")
	}
	d, err := time.ParseDuration(args[0])
	if err != nil {
		return err
	}
	time.Sleep(d)
	return nil
}

// report is what a probe knows of one target (of one flow to it, with
// --flows).
type report struct {
	target     string
	flow       int    // 0: a new flow for each datagram; else the flow's number, from 1
	lastSource string // as the target saw this pod
	answers    int
	failures   int
	lastError  string
}

// String is the log line: "target=T source=S answers=N failures=M", with
// " flow=F" after it for a kept flow.
func (r report) String() string {
	line := fmt.Sprintf("target=%s source=%s answers=%d failures=%d", r.target, r.lastSource, r.answers, r.failures)
	if r.flow > 0 {
		line += fmt.Sprintf(" flow=%d", r.flow)
	}
	if r.lastError != "" {
		line += " error=" + strings.ReplaceAll(r.lastError, " ", "_")
	}
	return line
}

// defaultAnswerTimeout bounds one exchange (probe --answer-timeout):
// answers come in well under a millisecond; a lost one (during a
// failover) must not delay the next datagram by much more than the
// interval, or the probe would measure its own wait rather than when the
// path came back.
const defaultAnswerTimeout = 100 * time.Millisecond

func probe(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	interval := fs.Duration("interval", 50*time.Millisecond, "time between datagrams to each target")
	every := fs.Duration("report", time.Second, "how often each target's state is logged besides its changes")
	answerTimeout := fs.Duration("answer-timeout", defaultAnswerTimeout, "how long a datagram's answer is waited for before the next datagram")
	flows := fs.Int("flows", 0, "send to each target over this many flows (sockets) kept for the pod's life, each logged apart; 0: a new flow for each datagram")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("no target")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var mu sync.Mutex // one log line at a time
	var wg sync.WaitGroup
	type flow struct {
		target string
		number int
	}
	var all []flow
	for _, target := range fs.Args() {
		if *flows == 0 {
			all = append(all, flow{target, 0})
		}
		for i := range *flows {
			all = append(all, flow{target, i + 1})
		}
	}
	for _, f := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := report{target: f.target, flow: f.number}
			buf := make([]byte, 256)
			logged := time.Now()
			send := func() (string, error) { return exchange(f.target, buf, *answerTimeout) }
			if f.number > 0 {
				conn, err := net.Dial("udp", f.target)
				if err != nil {
					fmt.Fprintln(os.Stderr, "testapp:", err)
					return
				}
				defer conn.Close()
				send = func() (string, error) { return exchangeOn(conn, buf, *answerTimeout) }
			}
			for ctx.Err() == nil {
				src, err := send()
				changed := false
				if err != nil {
					r.failures++
					r.lastError = err.Error()
				} else {
					r.answers++
					changed = src != r.lastSource
					r.lastSource, r.lastError = src, ""
				}
				if changed || time.Since(logged) >= *every {
					mu.Lock()
					fmt.Println(time.Now().UTC().Format(time.RFC3339Nano), r)
					mu.Unlock()
					logged = time.Now()
				}
				select {
				case <-ctx.Done():
				case <-time.After(*interval):
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

// exchange sends one datagram to target on a new socket (a new flow each
// time, as a fresh client would) and returns the answer.
func exchange(target string, buf []byte, timeout time.Duration) (string, error) {
	conn, err := net.DialTimeout("udp", target, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return exchangeOn(conn, buf, timeout)
}

// exchangeOn sends one datagram on conn and returns the answer, waited
// for at most timeout.
func exchangeOn(conn net.Conn, buf []byte, timeout time.Duration) (string, error) {
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("probe\n")); err != nil {
		return "", err
	}
	n, err := conn.Read(buf)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

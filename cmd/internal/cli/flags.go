package cli

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"

	// The JSON log format (--logging-format=json), as Kubernetes
	// components offer it.
	_ "k8s.io/component-base/logs/json/register"
)

// Flags is a command's command line as current Kubernetes components read
// theirs: pflag syntax (--name=value or --name value; -v is the only
// shorthand), the logging flags of k8s.io/component-base
// (--logging-format=text|json, -v, --vmodule, --log-flush-frequency) and
// --version. klog's legacy flags (--logtostderr, --alsologtostderr,
// --log_dir, --log_file, --skip_headers, ...) are not among them: they are
// refused as unknown.
type Flags struct {
	*pflag.FlagSet
	name    string
	logging *logsapi.LoggingConfiguration
	version bool
	// out receives --version and --help.
	out io.Writer
}

// NewFlags is the command line of the command name, with the logging flags
// and --version; the command adds its own flags to it.
func NewFlags(name string) *Flags {
	f := &Flags{
		FlagSet: pflag.NewFlagSet(name, pflag.ContinueOnError),
		name:    name,
		logging: logsapi.NewLoggingConfiguration(),
		out:     os.Stdout,
	}
	f.SetOutput(f.out)
	f.BoolVar(&f.version, "version", false, "print the version and exit")
	logsapi.AddFlags(f.logging, f.FlagSet)
	return f
}

// Parse reads args (the command's name left out) and applies the logging
// flags, or else answers --version or --help, and then done says so: the
// command has nothing more to do. The logging configuration applies once
// per process, as early as possible: before the command starts any
// goroutine that logs.
func (f *Flags) Parse(args []string) (done bool, err error) {
	switch err := f.FlagSet.Parse(args); {
	case errors.Is(err, pflag.ErrHelp):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("%w (%s --help lists the flags)", err, f.name)
	}
	if f.NArg() > 0 {
		return false, fmt.Errorf("unexpected arguments %q: every option is a flag (%s --help lists them)", f.Args(), f.name)
	}
	if f.version {
		fmt.Fprintf(f.out, "%s %s\n", f.name, Version)
		return true, nil
	}
	if err := logsapi.ValidateAndApply(f.logging, nil); err != nil {
		return false, fmt.Errorf("logging flags: %w", err)
	}
	// What libraries print through Go's log package (net/http's server
	// errors) goes through klog too, in the same format.
	log.SetOutput(logs.KlogWriter{})
	log.SetFlags(0)
	return false, nil
}

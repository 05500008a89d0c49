package main

import (
	"fmt"
	"io"
	"os"

	"gotpstub/export"
)

const exportUsage = "usage: gotpstub export --format json|ctf|perfetto [-o OUT] TRACEFILE"

// exportCmd is `gotpstub export --format json|ctf|perfetto [-o OUT] TRACEFILE`.
func exportCmd(args []string) int {
	format, out, file := "", "", ""
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case (a == "--format" || a == "-o") && i+1 < len(args):
			if a == "-o" {
				out = args[i+1]
			} else {
				format = args[i+1]
			}
			i++
		case len(a) > 1 && a[0] == '-':
			fmt.Fprintf(os.Stderr, "gotpstub export: unknown option %q\n%s\n", a, exportUsage)
			return 2
		case file == "":
			file = a
		default:
			fmt.Fprintln(os.Stderr, exportUsage)
			return 2
		}
	}
	if file == "" || (format != "json" && format != "ctf" && format != "perfetto") {
		fmt.Fprintln(os.Stderr, exportUsage)
		return 2
	}
	if err := exportFile(format, file, out); err != nil {
		fmt.Fprintf(os.Stderr, "gotpstub export: %v\n", err)
		return 1
	}
	return 0
}

func exportFile(format, file, out string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	t, err := export.Read(f)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if format == "ctf" {
		if out == "" {
			out = file + ".ctf"
		}
		return t.WriteCTF(out)
	}
	var w io.Writer = os.Stdout
	if out != "" {
		o, err := os.Create(out)
		if err != nil {
			return err
		}
		defer o.Close()
		w = o
	}
	if format == "perfetto" {
		skipped, err := t.WritePerfetto(w)
		if err != nil {
			return err
		}
		if skipped > 0 {
			fmt.Fprintf(os.Stderr, "gotpstub export: %d frames without a time left out of the Perfetto trace\n", skipped)
		}
	} else if err := t.WriteJSON(w); err != nil {
		return err
	}
	if o, ok := w.(*os.File); ok && o != os.Stdout {
		return o.Close()
	}
	return nil
}

package main

import (
	"fmt"
	"os"

	"gotpstub/inferior"
)

// machineCheck is one thing `gotpstub check` looks at.
type machineCheck struct {
	name, what string
	run        func() error
}

// machineChecks are the checks of every ISA, then this one's
// (isaChecks).
var machineChecks = append([]machineCheck{
	{"debug-registers", "hardware breakpoints and watchpoints trap",
		func() error { return inferior.ProbeDebugRegisters("/bin/true") }},
}, isaChecks...)

// check runs the machine checks named in args (all without arguments),
// prints one line each and returns 1 if one failed, 2 for an unknown
// name.
func check(args []string) int {
	todo := machineChecks
	if len(args) > 0 {
		todo = nil
		for _, a := range args {
			found := false
			for _, c := range machineChecks {
				if c.name == a {
					todo, found = append(todo, c), true
				}
			}
			if !found {
				fmt.Fprintf(os.Stderr, "gotpstub check: no check %q\n", a)
				return 2
			}
		}
	}
	status := 0
	for _, c := range todo {
		if err := c.run(); err != nil {
			fmt.Printf("%s: no: %v\n", c.name, err)
			status = 1
			continue
		}
		fmt.Printf("%s: yes (%s)\n", c.name, c.what)
	}
	return status
}

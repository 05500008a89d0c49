package main

import (
	"errors"
	"os"

	"gotpstub/inferior"
)

// isaChecks are the x86-64 machine checks.
var isaChecks = []machineCheck{
	{"fsgsbase", "rdfsbase in user space (per-thread lanes for fast tracepoints)", fsgsbase},
}

// fsgsbase says whether the kernel lets user space use rdfsbase
// (AT_HWCAP2 has HWCAP2_FSGSBASE).
func fsgsbase() error {
	auxv, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return err
	}
	if v, _ := inferior.AuxvValue(auxv, inferior.AtHWCap2); v&inferior.HWCap2FSGSBase != 0 {
		return nil
	}
	return errors.New("HWCAP2_FSGSBASE not set: every thread shares one lane")
}

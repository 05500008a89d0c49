package main

// isaChecks are the arm64 machine checks: none of its own yet (fsgsbase
// is x86-64's, for fast tracepoints, which arm64 does not have).
var isaChecks []machineCheck

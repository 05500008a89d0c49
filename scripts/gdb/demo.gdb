# demo.gdb: a trace experiment on testdata/demo.c, run by scripts/demo.sh
# after `target remote`. It stops in main first (so the shared libraries
# are loaded before the tracepoints are downloaded), defines three
# tracepoints, runs the program to its end, then prints every trace frame.

break main
continue

# A trace state variable counting calls of compute, on the target.
tvariable $calls = 0

# Conditional, on demo.c line 26 ("return square + sum + ...", where the
# locals are set): only every third call; the arguments, the locals, the
# struct behind p and the string name points to.
# A fast tracepoint: gotpstub jumps to a pad that evaluates the condition
# and collects inside the program (with gdbserver it would need its
# in-process agent; without one gdb downloads it as a trap tracepoint).
ftrace demo.c:26 if n % 3 == 0
actions
  collect $args, $locals, *p
  collect/s name
end

# Every call: count it in $calls and record the counter with the globals.
trace compute
actions
  teval $calls = $calls + 1
  collect $calls, call_count, history
end

# At the end: the final state of the globals.
trace demo_done
actions
  collect $calls, call_count, history
end

break demo_done
tstart
continue
tstop
tstatus

echo \n=== the trace frames ===\n
tfind start
while ($trace_frame != -1)
  tdump
  echo \n
  tfind
end
tfind none
echo === $calls counted on the target ===\n
print $calls

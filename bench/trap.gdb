# trap.gdb: the gdb side of scripts/bench-trap.sh, run after `target remote`.
# One conditional trap tracepoint on hit() (true for every other call) that
# collects the argument and all registers; the experiment runs for the whole
# timed loop of bench/hitloop.c and is stopped at loop_done().

# 64 MiB: a frame with $regs is about 0.8 KB and the default 5 MiB buffer
# would fill (and stop the experiment) after about 6400 frames.
set trace-buffer-size 67108864

break main
continue

trace hit if i % 2 == 0
actions
  collect i, $regs
end

break loop_done
tstart
continue
tstop
tstatus

# Let the program print its loop time and exit.
delete
continue

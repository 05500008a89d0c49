set pagination off
set confirm off
target remote :2345
break main
continue
tvariable $v = 5
tvariable $neg = -3
trace work if n > 2
passcount 6
actions
collect $regs
collect counter, buf, points[n & 3], local
teval $v = $v + 1
collect $v
while-stepping 2
collect $regs
end
end
trace prog.c:16
actions
collect s
end
tstatus
break 16
tstart
continue
tstatus
tfind start
info registers rip
print counter
print $v
tdump
tfind pc work
tfind tracepoint 2
tfind none
info tracepoints
tsave -r /tmp/cap/saved.tf
tsave /tmp/cap/local.tf
kill

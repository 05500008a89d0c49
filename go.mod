module gotpstub

go 1.26.0

require (
	golang.org/x/arch v0.32.0
	golang.org/x/sys v0.49.0
)

require google.golang.org/protobuf v1.36.12

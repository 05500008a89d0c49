package export

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// perfettoSchema is the part of Perfetto's trace schema WritePerfetto
// uses, with Perfetto's names and field numbers (protos/perfetto/trace).
func perfettoSchema(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	field := func(name string, num int32, label *descriptorpb.FieldDescriptorProto_Label, typ descriptorpb.FieldDescriptorProto_Type, msg string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(num), Label: label, Type: typ.Enum()}
		if msg != "" {
			f.TypeName = proto.String(".perfetto.protos." + msg)
		}
		return f
	}
	const (
		u64  = descriptorpb.FieldDescriptorProto_TYPE_UINT64
		u32  = descriptorpb.FieldDescriptorProto_TYPE_UINT32
		i64  = descriptorpb.FieldDescriptorProto_TYPE_INT64
		str  = descriptorpb.FieldDescriptorProto_TYPE_STRING
		msg  = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
		enum = descriptorpb.FieldDescriptorProto_TYPE_ENUM
	)
	message := func(name string, fields ...*descriptorpb.FieldDescriptorProto) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: proto.String(name), Field: fields}
	}
	event := message("TrackEvent",
		field("debug_annotations", 4, rep, msg, "DebugAnnotation"),
		field("type", 9, opt, enum, "TrackEvent.Type"),
		field("track_uuid", 11, opt, u64, ""),
		field("categories", 22, rep, str, ""),
		field("name", 23, opt, str, ""),
		field("counter_value", 30, opt, i64, ""))
	event.EnumType = []*descriptorpb.EnumDescriptorProto{{Name: proto.String("Type"), Value: []*descriptorpb.EnumValueDescriptorProto{
		{Name: proto.String("TYPE_UNSPECIFIED"), Number: proto.Int32(0)},
		{Name: proto.String("TYPE_SLICE_BEGIN"), Number: proto.Int32(1)},
		{Name: proto.String("TYPE_SLICE_END"), Number: proto.Int32(2)},
		{Name: proto.String("TYPE_INSTANT"), Number: proto.Int32(3)},
		{Name: proto.String("TYPE_COUNTER"), Number: proto.Int32(4)},
	}}}
	file := &descriptorpb.FileDescriptorProto{
		Name: proto.String("perfetto_subset.proto"), Package: proto.String("perfetto.protos"), Syntax: proto.String("proto2"),
		MessageType: []*descriptorpb.DescriptorProto{
			message("Trace", field("packet", 1, rep, msg, "TracePacket")),
			message("TracePacket",
				field("timestamp", 8, opt, u64, ""),
				field("trusted_packet_sequence_id", 10, opt, u32, ""),
				field("track_event", 11, opt, msg, "TrackEvent"),
				field("sequence_flags", 13, opt, u32, ""),
				field("track_descriptor", 60, opt, msg, "TrackDescriptor")),
			event,
			message("TrackDescriptor",
				field("uuid", 1, opt, u64, ""),
				field("name", 2, opt, str, ""),
				field("counter", 8, opt, msg, "CounterDescriptor")),
			message("CounterDescriptor"),
			message("DebugAnnotation",
				field("uint_value", 3, opt, u64, ""),
				field("int_value", 4, opt, i64, ""),
				field("string_value", 6, opt, str, ""),
				field("pointer_value", 7, opt, u64, ""),
				field("name", 10, opt, str, "")),
		},
	}
	fd, err := protodesc.NewFile(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().ByName("Trace")
}

// noUnknown fails on any field the schema does not define.
func noUnknown(t *testing.T, m protoreflect.Message) {
	t.Helper()
	if len(m.GetUnknown()) > 0 {
		t.Errorf("%s has fields outside the schema: % x", m.Descriptor().FullName(), m.GetUnknown())
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				noUnknown(t, v.List().Get(i).Message())
			}
		case fd.Message() != nil:
			noUnknown(t, v.Message())
		}
		return true
	})
}

// The Perfetto trace decodes against Perfetto's schema, with nothing
// outside it: track descriptors, one instant event per timed frame, a
// counter track for each trace state variable.
func TestWritePerfetto(t *testing.T) {
	tr, err := Read(bytes.NewReader(sampleFile(t, true)))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	skipped, err := tr.WritePerfetto(&out)
	if err != nil {
		t.Fatal(err)
	}
	if skipped != 1 {
		t.Errorf("%d frames skipped, want 1 (the one without a time)", skipped)
	}
	trace := dynamicpb.NewMessage(perfettoSchema(t))
	if err := proto.Unmarshal(out.Bytes(), trace); err != nil {
		t.Fatalf("decoding against the schema: %v", err)
	}
	noUnknown(t, trace)
	js, err := protojson.MarshalOptions{Multiline: false}.Marshal(trace)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(js), " ", "")
	for _, want := range []string{
		`"trackDescriptor":{"uuid":"4294967297","name":"tracepoint1:*0x401000"}`,
		`"trackDescriptor":{"uuid":"4294967298","name":"tracepoint2:demo.c:30"}`,
		`"timestamp":"2000"`,
		`"type":"TYPE_INSTANT","trackUuid":"4294967297","categories":["gdb-tracepoint"],"name":"tracepoint1"`,
		`{"pointerValue":"42","name":"rdi"}`,
		`{"stringValue":"01020304","name":"memory0x404028"}`,
		`"trackDescriptor":{"uuid":"8589934594","name":"$n","counter":{}}`,
		`"type":"TYPE_COUNTER","trackUuid":"8589934594","counterValue":"-5"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("decoded trace lacks %s:\n%s", want, text)
		}
	}
	if n := strings.Count(text, `"TYPE_INSTANT"`); n != 2 {
		t.Errorf("%d instant events, want 2", n)
	}
}

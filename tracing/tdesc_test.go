package tracing

import (
	"strings"
	"testing"
)

func TestExpandXIncludes(t *testing.T) {
	docs := map[string]string{
		"target.xml": "<?xml version=\"1.0\"?>\n<!DOCTYPE target SYSTEM \"gdb-target.dtd\">\n<target>\n  <architecture>i386:x86-64</architecture>\n  <xi:include href=\"a.xml\"/>\n  <xi:include href=\"b.xml\"/>\n</target>\n",
		"a.xml":      "<?xml version=\"1.0\"?>\n<!DOCTYPE feature SYSTEM \"gdb-target.dtd\">\n<feature name=\"a\">\n  <reg name=\"x\" bitsize=\"64\"/>\n</feature>\n",
		"b.xml":      "<?xml version=\"1.0\"?>\n<!-- comment kept -->\n<feature name=\"b\"/>\n",
		"loop.xml":   "<x><xi:include href=\"loop.xml\"/></x>",
		"bad.xml":    "<x><xi:include href=\"a.xml\"</x>",
		"nohref.xml": "<x><xi:include/></x>",
	}
	fetch := func(annex string) ([]byte, bool) {
		d, ok := docs[annex]
		return []byte(d), ok
	}
	// What gdb 13's tsave writes for this target.xml (xml_process_xincludes:
	// declarations dropped, included DOCTYPEs dropped, text kept verbatim).
	want := "\n<!DOCTYPE target SYSTEM \"gdb-target.dtd\">\n<target>\n  <architecture>i386:x86-64</architecture>\n  " +
		"\n\n<feature name=\"a\">\n  <reg name=\"x\" bitsize=\"64\"/>\n</feature>\n" +
		"\n  " +
		"\n<!-- comment kept -->\n<feature name=\"b\"/>\n" +
		"\n</target>\n"
	got, err := expandXIncludes(fetch, "target.xml", 0)
	if err != nil || got != want {
		t.Errorf("expandXIncludes = %q, %v\nwant %q", got, err, want)
	}
	for _, annex := range []string{"loop.xml", "bad.xml", "nohref.xml", "missing.xml"} {
		if out, err := expandXIncludes(fetch, annex, 0); err == nil {
			t.Errorf("%s: expanded to %q without error", annex, out)
		}
	}
	// The stub's own description expands and keeps every feature.
	e, _, _ := newTestEngine(t)
	td := e.tfileTDesc()
	if strings.Contains(td, "xi:include") || strings.Contains(td, "<?xml") || !strings.Contains(td, `<feature name="org.gnu.gdb.i386.core">`) {
		t.Errorf("tfile tdesc of the amd64 layout:\n%s", td)
	}
}

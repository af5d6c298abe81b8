package sealing

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/internal/app"
)

// registries are every aggregate's event registry.
var registries = app.Registries()

// stringFields lists the dotted JSON paths of t's string values (strings,
// string slices, the values of string-keyed maps as "name.*").
func stringFields(t reflect.Type, path string, out *[]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Map:
		stringFields(t.Elem(), path+".*", out)
	case t.Kind() == reflect.String:
		*out = append(*out, path)
	case t.Kind() == reflect.Struct && t.PkgPath() != "time":
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			p := name
			if f.Anonymous && f.Tag.Get("json") == "" {
				p = path
			} else if path != "" {
				p = path + "." + name
			}
			stringFields(f.Type, p, out)
		}
	}
}

// TestEveryStringFieldIsDeclared: every string field of every registered
// event type is declared sealed or plain on purpose, so a personal field
// added to an event cannot reach the log in plain text unnoticed; and no
// declaration names a field or type that does not exist.
func TestEveryStringFieldIsDeclared(t *testing.T) {
	registered := map[string]bool{}
	for _, r := range registries {
		for typ, ctor := range r {
			registered[typ] = true
			d, ok := Declarations[typ]
			if !ok {
				t.Errorf("event type %s is not declared", typ)
				continue
			}
			var fields []string
			stringFields(reflect.TypeOf(ctor()).Elem(), "", &fields)
			declared := append(slices.Clone(d.Sealed), d.Plain...)
			for _, f := range fields {
				if !slices.Contains(declared, f) {
					t.Errorf("%s: string field %q is neither sealed nor plain", typ, f)
				}
			}
			for _, f := range declared {
				if !slices.Contains(fields, f) {
					t.Errorf("%s: declared field %q does not exist", typ, f)
				}
			}
			for _, f := range d.Sealed {
				if slices.Contains(d.Plain, f) {
					t.Errorf("%s: %q is declared both sealed and plain", typ, f)
				}
			}
		}
	}
	var stale []string
	for typ := range Declarations {
		if !registered[typ] {
			stale = append(stale, typ)
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("declared types no registry has: %v", stale)
	}
}

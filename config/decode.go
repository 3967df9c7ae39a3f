package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// The file is parsed into a yaml.Node tree and then walked against the Go
// structs, so that every error knows its path and line and all of them are
// reported, not just the first. The walk has the semantics of a yaml.v3
// Decoder with KnownFields(true) (unknown and duplicate keys are errors,
// merge keys "<<" work) and leaves are decoded by yaml.v3 itself. Values
// absent from the file keep what the struct held before: the defaults.

// source remembers where each value of a parsed configuration was written.
type source struct {
	file  string
	nodes map[string]*yaml.Node // path -> the node that wrote it
}

// line returns the line of path, or of its nearest ancestor written in the
// file (a missing key is reported at its parent); 0 for a configuration
// built in Go.
func (s *source) line(path string) int {
	if s == nil {
		return 0
	}
	for {
		if n, ok := s.nodes[path]; ok && n.Line > 0 {
			return n.Line
		}
		if path == "" {
			return 1
		}
		path = parentPath(path)
	}
}

// written reports whether the file wrote path itself (not a default).
func (s *source) written(path string) bool {
	if s == nil {
		return false
	}
	_, ok := s.nodes[path]
	return ok
}

func (s *source) fileName() string {
	if s == nil {
		return ""
	}
	return s.file
}

// parentPath returns "accounts[0]" for "accounts[0].route", "accounts" for
// "accounts[0]" and "" for "accounts".
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// defaulter is implemented by the types whose list elements or pointers
// get defaults before the file's values are decoded into them.
type defaulter interface{ setDefaults() }

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

type decoder struct {
	source
	errs      []Error
	active    map[*yaml.Node]bool // alias targets being expanded
	budget    int                 // node visits left; bounds alias expansion
	exhausted bool                // the walk stopped: budget or MaxErrors
}

func newDecoder(file string, size int) *decoder {
	return &decoder{
		source: source{file: file, nodes: map[string]*yaml.Node{}},
		active: map[*yaml.Node]bool{},
		// Without aliases a file visits each of its nodes (two bytes at
		// least) once.
		budget: 100_000 + size,
	}
}

// errorf records a problem; past MaxErrors it stops the walk instead, with
// a last problem saying so.
func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	if len(d.errs) >= MaxErrors {
		if !d.exhausted {
			d.exhausted = true
			d.errs = append(d.errs, Error{File: d.file, Line: line, Msg: fmt.Sprintf("too many problems: stopped after the first %d", MaxErrors)})
		}
		return
	}
	d.errs = append(d.errs, Error{File: d.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// document decodes the single YAML document in data into cfg; false when
// data is not one well-formed YAML document (and then nothing is decoded).
func (d *decoder) document(data []byte, cfg *Config) bool {
	if len(data) > MaxFileSize {
		d.errs = append(d.errs, tooLarge(d.file))
		return false
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return true // empty: all defaults
		}
		d.syntax(err)
		return false
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		d.syntax(err)
		return false
	default:
		n := &extra
		if len(extra.Content) > 0 {
			n = extra.Content[0]
		}
		d.errorf(n, "", "only one YAML document is allowed")
		return false
	}
	root := &doc
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return true
		}
		root = doc.Content[0]
	}
	d.value(root, reflect.ValueOf(cfg).Elem(), "")
	return true
}

// syntax records a yaml.v3 parse error, "yaml: line 3: did not find
// expected key", with its line.
func (d *decoder) syntax(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.Index(rest, ": "); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				line, msg = n, rest[i+2:]
			}
		}
	}
	d.errs = append(d.errs, Error{File: d.file, Line: line, Msg: "invalid YAML: " + msg})
}

// spend counts one node visit; false once the budget is gone (aliases that
// expand exponentially) or the walk stopped.
func (d *decoder) spend(n *yaml.Node, path string) bool {
	if d.budget--; d.budget >= 0 && !d.exhausted {
		return true
	}
	if !d.exhausted {
		d.exhausted = true
		d.errorf(n, path, "too many values: aliases expand beyond any sensible configuration")
	}
	return false
}

// resolve follows aliases. The targets stay marked active until release is
// called, so that an alias inside its own anchor is an error, not a loop.
func (d *decoder) resolve(n *yaml.Node, path string) (target *yaml.Node, release func(), ok bool) {
	var held []*yaml.Node
	release = func() {
		for _, t := range held {
			delete(d.active, t)
		}
	}
	for n.Kind == yaml.AliasNode {
		t := n.Alias
		if t == nil || d.active[t] {
			d.errorf(n, path, "alias refers to a value that contains it")
			release()
			return nil, nil, false
		}
		d.active[t] = true
		held = append(held, t)
		n = t
	}
	return n, release, true
}

// value decodes node n, written at path, into v.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	if !d.spend(n, path) {
		return
	}
	d.nodes[path] = n
	at := n
	n, release, ok := d.resolve(n, path)
	if !ok {
		return
	}
	defer release()
	d.decode(at, n, v, path)
}

// decode decodes the resolved node n into v; at is where it was written.
func (d *decoder) decode(at, n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // "key:" or "key: ~" keeps the default
	}
	if reflect.PointerTo(v.Type()).Implements(unmarshalerType) {
		if err := n.Decode(v.Addr().Interface()); err != nil {
			var ve valueError
			if !errors.As(err, &ve) {
				ve = valueError("invalid value")
			}
			d.errorf(at, path, "%s", string(ve))
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			p := reflect.New(v.Type().Elem())
			if df, ok := p.Interface().(defaulter); ok {
				df.setDefaults()
			}
			v.Set(p)
		}
		d.decode(at, n, v.Elem(), path)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.errorf(at, path, "must be a mapping of keys to values")
			return
		}
		d.mapping(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errorf(at, path, "must be a list")
			return
		}
		if len(n.Content) > MaxListItems {
			d.errorf(at, path, "a list may have at most %d items (got %d)", MaxListItems, len(n.Content))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			e := s.Index(i)
			if df, ok := e.Addr().Interface().(defaulter); ok {
				df.setDefaults()
			}
			d.value(item, e, path+"["+strconv.Itoa(i)+"]")
		}
		v.Set(s)
	case reflect.String, reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind != yaml.ScalarNode {
			d.errorf(at, path, "must be %s", kindName(v.Kind()))
			return
		}
		// yaml.v3 would truncate 1.5 into an int; only an integer will do.
		isInt := v.Kind() != reflect.String && v.Kind() != reflect.Bool
		if isInt && n.ShortTag() != "!!int" {
			d.errorf(at, path, "must be %s%s", kindName(v.Kind()), gotValue(n, path))
			return
		}
		if err := n.Decode(v.Addr().Interface()); err != nil {
			d.errorf(at, path, "must be %s%s", kindName(v.Kind()), gotValue(n, path))
		}
	default:
		d.errorf(at, path, "cannot be decoded") // not reached: the schema has no other kinds
	}
}

// mapping decodes the keys of mapping node n into struct v. Keys merged
// with "<<" come first, so that the mapping's own keys override them.
func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	fields := yamlFields(v.Type())
	for i := len(n.Content) - 2; i >= 0; i -= 2 {
		if isMerge(n.Content[i]) {
			d.merge(n.Content[i+1], v, path)
		}
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if isMerge(k) {
			continue
		}
		if !d.spend(k, path) {
			return // every key costs: unknown ones too
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "keys must be plain strings")
			continue
		}
		name := k.Value
		kp := joinPath(path, name)
		if first, dup := seen[name]; dup {
			d.errorf(k, kp, "duplicate key (first at line %d)", first)
			continue
		}
		seen[name] = k.Line
		f, ok := fields[name]
		if !ok {
			d.errorf(k, kp, "unknown key%s", suggest(name, fields))
			continue
		}
		d.value(val, v.Field(f), kp)
	}
}

// merge decodes the value of a "<<" key: a mapping or a list of mappings,
// the earlier ones winning.
func (d *decoder) merge(m *yaml.Node, v reflect.Value, path string) {
	if !d.spend(m, path) {
		return
	}
	at := m
	m, release, ok := d.resolve(m, path)
	if !ok {
		return
	}
	defer release()
	switch m.Kind {
	case yaml.MappingNode:
		d.mapping(m, v, path)
		return
	case yaml.SequenceNode:
		for i := len(m.Content) - 1; i >= 0; i-- {
			item, release, ok := d.resolve(m.Content[i], path)
			if !ok {
				continue
			}
			if item.Kind == yaml.MappingNode && d.spend(item, path) {
				d.mapping(item, v, path)
			} else if item.Kind != yaml.MappingNode {
				d.errorf(m.Content[i], path, "a merge (<<) takes a mapping or a list of mappings")
			}
			release()
		}
		return
	}
	d.errorf(at, path, "a merge (<<) takes a mapping or a list of mappings")
}

func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" &&
		(k.Tag == "" || k.Tag == "!" || k.ShortTag() == "!!merge")
}

// yamlFields maps the yaml names of t's fields to their indices.
func yamlFields(t reflect.Type) map[string]int {
	fields := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = i
	}
	return fields
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	default:
		return "an integer"
	}
}

// gotValue quotes the offending scalar, shortened, and never for a password.
func gotValue(n *yaml.Node, path string) string {
	if isSecret(path) {
		return ""
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "..."
	}
	return fmt.Sprintf(" (got %q)", v)
}

func isSecret(path string) bool {
	last := path[strings.LastIndexByte(path, '.')+1:]
	return last == "password" || last == "password_hash"
}

// suggest proposes the known key closest to a misspelt one.
func suggest(name string, fields map[string]int) string {
	best, bestDist := "", 3
	for f := range fields {
		if dist := editDistance(name, f); dist < bestDist || dist == bestDist && best != "" && f < best {
			best, bestDist = f, dist
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Bounds of the work a configuration file can cost: Load and Parse refuse
// a file larger than MaxFileSize or a list longer than MaxListItems, and
// the walk stops after MaxErrors problems or, for aliases that expand too
// far, after about 100,000 values more than the file's size in bytes.
const (
	MaxFileSize  = 1 << 20
	MaxErrors    = 100
	MaxListItems = 10_000
)

func tooLarge(file string) Error {
	return Error{File: file, Msg: fmt.Sprintf("the file is larger than %d bytes, the most a configuration may have", MaxFileSize)}
}

// readFile reads a configuration file, refusing one larger than
// MaxFileSize without reading it all.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(data) > MaxFileSize {
		return nil, newErrors([]Error{tooLarge(path)})
	}
	return data, nil
}

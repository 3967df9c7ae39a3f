package config

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Error is one problem in a configuration. It never contains a password.
type Error struct {
	File string // the name given to Parse; "" for a configuration built in Go
	Line int    // 1-based line of the offending value; 0 when unknown
	Path string // "accounts[0].idempotency.key"; "" for the file as a whole
	Msg  string
}

// Error formats e as "config: FILE:LINE: PATH: MSG".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	switch {
	case e.File != "" && e.Line > 0:
		b.WriteString(e.File + ":" + strconv.Itoa(e.Line) + ": ")
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		b.WriteString("line " + strconv.Itoa(e.Line) + ": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one configuration, ordered by line.
// Parse, Load and Validate return it as their error.
type Errors struct {
	List []Error
}

func newErrors(list []Error) *Errors {
	slices.SortStableFunc(list, func(a, b Error) int { return cmp.Compare(a.Line, b.Line) })
	return &Errors{List: list}
}

// Error is one problem per line.
func (e *Errors) Error() string {
	lines := make([]string, len(e.List))
	for i := range e.List {
		lines[i] = e.List[i].Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns each problem as an *Error, for errors.As.
func (e *Errors) Unwrap() []error {
	errs := make([]error, len(e.List))
	for i := range e.List {
		errs[i] = &e.List[i]
	}
	return errs
}

// Package sqltable is a sql session's results as tables, for the MCP
// server's repl tool. Its sql sessions have psql print results as HTML
// (\pset format html), the one format of psql whose result sets cannot
// run into each other or into what a value holds: it escapes every
// value. Results takes the tables out of that output and leaves the rest
// (command tags, notices, errors) as text.
package sqltable

import (
	"html"
	"strings"
)

// Table is one result set.
type Table struct {
	Columns []string `json:"columns"`
	// Rows' cells are text as psql prints them; null is SQL's NULL. A
	// value of spaces alone comes back empty (psql's HTML keeps none).
	Rows [][]*string `json:"rows"`
}

// Setup is what the repl tool sends a sql session it opens: results
// as HTML, NULL as nullMark, no "(N rows)" after each.
func Setup(nullMark string) string {
	return "\\pset format html\n\\pset null '" + nullMark + "'\n\\pset footer off\n"
}

// Results splits psql's HTML output into its tables and the text
// around them (a command's tag, printed as <p>TAG</p>, as its text). A
// table it cannot read (\x's layout) stays in the text.
func Results(out, nullMark string) (text string, tables []Table) {
	var rest strings.Builder
	for {
		i := strings.Index(out, "<table border=\"1\">\n")
		if i < 0 {
			rest.WriteString(out)
			break
		}
		j := strings.Index(out[i:], "</table>\n")
		if j < 0 {
			rest.WriteString(out)
			break
		}
		block := out[i : i+j]
		rest.WriteString(out[:i])
		out = out[i+j+len("</table>\n"):]
		if t, ok := parseTable(block, nullMark); ok {
			tables = append(tables, t)
		} else {
			rest.WriteString(block + "</table>\n")
		}
	}
	// A command's tag comes as a paragraph of its own.
	lines := strings.SplitAfter(rest.String(), "\n")
	for i, l := range lines {
		inner, ok := strings.CutPrefix(strings.TrimSuffix(l, "\n"), "<p>")
		if inner, end := strings.CutSuffix(inner, "</p>"); ok && end && !strings.Contains(inner, "<") {
			lines[i] = cell(inner) + "\n"
		}
	}
	return strings.Join(lines, ""), tables
}

// parseTable reads one of psql's HTML tables: a row of <th> cells, then
// rows of <td> cells.
func parseTable(block, nullMark string) (Table, bool) {
	var t Table
	rows := strings.Split(block, "<tr")[1:]
	if len(rows) == 0 {
		return t, false
	}
	for n, r := range rows {
		tag := "<td"
		if n == 0 {
			tag = "<th"
		}
		var cells []*string
		for _, c := range strings.Split(r, tag)[1:] {
			// A value holds no '<' (escaped): the first "</" ends it.
			start := strings.Index(c, ">")
			end := strings.Index(c, "</")
			if start < 0 || end < start {
				return t, false
			}
			v := cell(c[start+1 : end])
			if n > 0 && v == nullMark {
				cells = append(cells, nil)
				continue
			}
			cells = append(cells, &v)
		}
		if n == 0 {
			if strings.Contains(r, "<td") || len(cells) == 0 {
				return t, false
			}
			for _, c := range cells {
				t.Columns = append(t.Columns, *c)
			}
			continue
		}
		if strings.Contains(r, "<th") || len(cells) != len(t.Columns) {
			return t, false
		}
		t.Rows = append(t.Rows, cells)
	}
	if t.Rows == nil {
		t.Rows = [][]*string{}
	}
	return t, true
}

// cell is a value as psql's HTML escaped it.
func cell(s string) string {
	if s == "&nbsp; " {
		return ""
	}
	s = strings.ReplaceAll(s, "<br />\n", "\n")
	s = strings.ReplaceAll(s, "&nbsp;", " ")
	return html.UnescapeString(s)
}

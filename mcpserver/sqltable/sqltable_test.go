package sqltable

import (
	"reflect"
	"testing"
)

// psql's HTML output (\pset format html, \pset null MARK, \pset footer
// off) of two result sets around a command tag and an error: the tables
// come out with their values unescaped and NULL as nil, the rest as text.
func TestSQLResultsSplitsPsqlsHTML(t *testing.T) {
	out := "<p>INSERT 0 3</p>\n" +
		"<table border=\"1\">\n  <tr>\n    <th align=\"center\">a</th>\n    <th align=\"center\">b</th>\n  </tr>\n" +
		"  <tr valign=\"top\">\n    <td align=\"right\">1</td>\n    <td align=\"left\">x&lt;y &amp; &quot;q&quot;<br />\nz</td>\n  </tr>\n" +
		"  <tr valign=\"top\">\n    <td align=\"right\">2</td>\n    <td align=\"left\">MARK</td>\n  </tr>\n" +
		"  <tr valign=\"top\">\n    <td align=\"right\">3</td>\n    <td align=\"left\">&nbsp; </td>\n  </tr>\n" +
		"</table>\n" +
		"ERROR:  column \"nosuch\" does not exist\n" +
		"<table border=\"1\">\n  <tr>\n    <th align=\"center\">five</th>\n  </tr>\n</table>\n"
	text, tables := Results(out, "MARK")
	if text != "INSERT 0 3\nERROR:  column \"nosuch\" does not exist\n" {
		t.Errorf("the text around the tables: %q", text)
	}
	s := func(v string) *string { return &v }
	want := []Table{
		{Columns: []string{"a", "b"}, Rows: [][]*string{{s("1"), s("x<y & \"q\"\nz")}, {s("2"), nil}, {s("3"), s("")}}},
		{Columns: []string{"five"}, Rows: [][]*string{}},
	}
	if !reflect.DeepEqual(tables, want) {
		t.Errorf("tables: %+v; want %+v", tables, want)
	}
	// An expanded (\x) table is no table of columns: it stays as text.
	x := "<table border=\"1\">\n  <tr><td colspan=\"2\" align=\"center\">Record 1</td></tr>\n  <tr valign=\"top\">\n    <th>a</th>\n    <td align=\"right\">1</td>\n  </tr>\n</table>\n"
	if text, tables := Results(x, "MARK"); text != x || tables != nil {
		t.Errorf("an expanded table: %q, %v; want it left as text", text, tables)
	}
}

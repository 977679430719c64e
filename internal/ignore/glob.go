package ignore

// One segment's glob: `*` any run of characters, `?` one, `[...]` one
// of a set, `\x` the character x. No `/` reaches here: Match splits
// paths and patterns at it.

import (
	"unicode"
	"unicode/utf8"
)

// matchSegment says whether name matches the glob pat. It is the greedy
// match that remembers the last `*` only: O(len(pat)·len(name)).
func matchSegment(pat, name string, w *work) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		if !w.spend(1) {
			return false // the caller sees ErrTooComplex
		}
		if p < len(pat) && pat[p] == '*' {
			for p < len(pat) && pat[p] == '*' {
				p++
			}
			star, mark = p, n
			continue
		}
		if p < len(pat) {
			if pa, na, ok := matchOne(pat, p, name, n); ok {
				p, n = p+pa, n+na
				continue
			}
		}
		if star < 0 {
			return false
		}
		_, sz := utf8.DecodeRuneInString(name[mark:])
		mark += sz
		p, n = star, mark
	}
	for p < len(pat) && pat[p] == '*' {
		p++
	}
	return p == len(pat)
}

// matchOne matches the pattern's element at p (not a `*`) against the
// character at n: how far each moves, and whether it matched.
func matchOne(pat string, p int, name string, n int) (int, int, bool) {
	r, sz := utf8.DecodeRuneInString(name[n:])
	switch pat[p] {
	case '?':
		return 1, sz, true
	case '[':
		end, ok := classEnd(pat, p)
		if !ok { // Parse refuses it; a literal '[' otherwise
			return 1, 1, name[n] == '['
		}
		return end + 1 - p, sz, inClass(pat[p+1:end], r)
	case '\\':
		if p+1 < len(pat) {
			return 2, 1, pat[p+1] == name[n]
		}
		return 1, 1, false
	}
	return 1, 1, pat[p] == name[n]
}

// classEnd is the index of the `]` closing the bracket expression that
// opens at s[i], and whether there is one.
func classEnd(s string, i int) (int, bool) {
	j := i + 1
	if j < len(s) && (s[j] == '!' || s[j] == '^') {
		j++
	}
	if j < len(s) && s[j] == ']' { // a leading ']' is itself
		j++
	}
	for j < len(s) {
		switch {
		case s[j] == '\\':
			j += 2
			continue
		case s[j] == '[' && j+1 < len(s) && s[j+1] == ':':
			k := j + 2
			for k+1 < len(s) && !(s[k] == ':' && s[k+1] == ']') {
				k++
			}
			if k+1 >= len(s) {
				return 0, false
			}
			if _, known := posixClasses[s[j+2:k]]; !known {
				return 0, false
			}
			j = k + 2
			continue
		case s[j] == ']':
			return j, true
		}
		j++
	}
	return 0, false
}

// posixClasses are the [:name:] sets git's wildmatch knows.
var posixClasses = map[string]func(rune) bool{
	"alnum": func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) },
	"alpha": unicode.IsLetter,
	"blank": func(r rune) bool { return r == ' ' || r == '\t' },
	"cntrl": unicode.IsControl,
	"digit": func(r rune) bool { return r >= '0' && r <= '9' },
	"graph": func(r rune) bool { return unicode.IsGraphic(r) && !unicode.IsSpace(r) },
	"lower": unicode.IsLower,
	"print": unicode.IsPrint,
	"punct": unicode.IsPunct,
	"space": unicode.IsSpace,
	"upper": unicode.IsUpper,
	"xdigit": func(r rune) bool {
		return r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F'
	},
}

// inClass says whether r is in the bracket expression body (between `[`
// and `]`, which classEnd found well formed).
func inClass(body string, r rune) bool {
	negate := false
	if body != "" && (body[0] == '!' || body[0] == '^') {
		negate, body = true, body[1:]
	}
	in := false
	for i := 0; i < len(body); {
		if body[i] == '[' && i+1 < len(body) && body[i+1] == ':' {
			k := i + 2
			for k+1 < len(body) && !(body[k] == ':' && body[k+1] == ']') {
				k++
			}
			if f := posixClasses[body[i+2:k]]; f != nil && f(r) {
				in = true
			}
			i = k + 2
			continue
		}
		lo, n := classChar(body, i)
		i += n
		hi := lo
		if i+1 < len(body) && body[i] == '-' {
			hi, n = classChar(body, i+1)
			i += 1 + n
		}
		if lo <= r && r <= hi {
			in = true
		}
	}
	return in != negate
}

// classChar is the character at body[i] (a backslash quoting the next)
// and the bytes it took.
func classChar(body string, i int) (rune, int) {
	if body[i] == '\\' && i+1 < len(body) {
		r, sz := utf8.DecodeRuneInString(body[i+1:])
		return r, 1 + sz
	}
	return utf8.DecodeRuneInString(body[i:])
}

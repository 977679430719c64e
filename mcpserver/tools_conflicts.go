package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// The tools that resolve a conflict (a path the project and the sandbox
// both changed since its base): conflict_versions and merge.

type versionsIn struct {
	Sandbox  string `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
	Path     string `json:"path" jsonschema:"the conflicting path, relative to the project's top, as the conflict named it"`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"bound each version to this many bytes (default and most: 1048576)"`
}

type versionOut struct {
	Which     string `json:"which" jsonschema:"base (what the sandbox was made from or last rebased onto), project (as it is now) or sandbox"`
	Kind      string `json:"kind" jsonschema:"file, absent, symlink, directory, other or unreadable: only a file has content"`
	Size      uint64 `json:"size,omitempty" jsonschema:"a file's whole size in bytes"`
	Content   string `json:"-"` // in the text, once
	Encoding  string `json:"encoding,omitempty" jsonschema:"how the text gives its content: utf-8, the text itself, or base64 for a binary file"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"the file is larger than the content given"`
	Note      string `json:"note,omitempty"`
}

type versionsOut struct {
	Path     string       `json:"path"`
	Versions []versionOut `json:"versions" jsonschema:"base, project and sandbox, in that order; their content is in the text, each under a line naming it"`
}

// text is each version's content, once, under a line saying which it
// is and what.
func (o versionsOut) text() string {
	var b strings.Builder
	for _, v := range o.Versions {
		if v.Kind != sandboxd1.VersionFile {
			fmt.Fprintf(&b, "--- %s: %s (%s) ---\n", v.Which, v.Kind, v.Note)
			continue
		}
		cut := ""
		if v.Truncated {
			cut = ", cut"
		}
		fmt.Fprintf(&b, "--- %s: %s, %s, %s%s ---\n%s", v.Which, o.Path, plural(v.Size, "byte"), v.Encoding, cut, v.Content)
		if v.Content != "" && !strings.HasSuffix(v.Content, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

type mergeIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
	Path    string `json:"path" jsonschema:"the conflicting path, relative to the project's top, as the conflict named it"`
	Markers bool   `json:"markers,omitempty" jsonschema:"when hunks conflict, write the file anyway with conflict markers (<<<<<<< sandbox, =======, >>>>>>> project) to edit"`
	DryRun  bool   `json:"dry_run,omitempty" jsonschema:"write nothing: return the merged text"`
}

type hunkSide struct {
	Start int    `json:"start" jsonschema:"the first line (1 is the file's first); with lines 0, the place after this line"`
	Lines int    `json:"lines"`
	Text  string `json:"text"`
}

type hunkOut struct {
	Sandbox hunkSide `json:"sandbox"`
	Base    hunkSide `json:"base"`
	Project hunkSide `json:"project"`
}

type mergeOut struct {
	Path    string    `json:"path"`
	Clean   bool      `json:"clean" jsonschema:"no hunk conflicts: the merge holds the project's changes and the sandbox's"`
	Written bool      `json:"written" jsonschema:"the sandbox's file was written"`
	Hunks   []hunkOut `json:"hunks,omitempty" jsonschema:"the conflicting hunks: what each version holds there"`
	Merged  string    `json:"-"` // with dry_run: in the text, once
	Notes   []string  `json:"notes,omitempty"`
}

// text is, for a dry run, the merged text (with conflict markers where
// it conflicts) under a line saying how it went; otherwise the JSON.
func (o mergeOut) text() string {
	if o.Merged == "" {
		return ""
	}
	how := "clean"
	if !o.Clean {
		how = plural(len(o.Hunks), "hunk") + " conflicting, between markers"
	}
	text := fmt.Sprintf("%s merged (dry run, nothing written): %s\n--- merged ---\n%s", o.Path, how, o.Merged)
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return text
}

func (s *server) addConflictTools(m *mcp.Server) {
	add(s, m, &mcp.Tool{Name: "conflict_versions", Annotations: readOnly("Show a conflict's three versions"),
		Description: "Show the three versions of a path that a rebase or promotion named as a conflict (changed in both the project and the sandbox): the base's (what the sandbox started from), the project's as it is now, and the sandbox's. Text as it is, a binary file as base64; at most 1 MiB each. Then merge them with the merge tool, or edit the sandbox's file."},
		s.conflictVersions)
	add(s, m, &mcp.Tool{Name: "merge", Annotations: destructive("Merge the project's change into the sandbox's file"),
		Description: "Three-way merge (diff3) of a conflicting path: the project's change since the sandbox's base brought into the sandbox's version. A clean merge is written into the sandbox; where both changed the same lines the file is left alone and the conflicting hunks come back (each version's lines and text), unless markers writes it with conflict markers. Text files of at most 1 MiB."},
		s.merge)
}

func (s *server) conflictVersions(ctx context.Context, in versionsIn) (versionsOut, error) {
	if in.MaxBytes < 0 {
		return versionsOut{}, invalidf("max_bytes is %d: give 1 or more (at most %d)", in.MaxBytes, sandboxd1.MaxVersionBytes)
	}
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return versionsOut{}, err
	}
	vs, err := sb.FileVersions(ctx, in.Path, uint64(min(in.MaxBytes, sandboxd1.MaxVersionBytes)))
	if err != nil {
		return versionsOut{}, err
	}
	out := versionsOut{Path: in.Path, Versions: []versionOut{}}
	for _, v := range vs {
		o := versionOut{Which: v.Which, Kind: v.Kind, Size: v.Size, Truncated: v.Truncated, Note: v.Note}
		if v.Kind == sandboxd1.VersionFile {
			o.Content, o.Encoding = fileText(v.Data)
			if v.Binary || bytes.IndexByte(v.Data, 0) >= 0 {
				o.Content, o.Encoding = base64.StdEncoding.EncodeToString(v.Data), encodingBase64
			}
		}
		out.Versions = append(out.Versions, o)
	}
	return out, nil
}

func (s *server) merge(ctx context.Context, in mergeIn) (mergeOut, error) {
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return mergeOut{}, err
	}
	res, err := sb.Merge(ctx, in.Path, client.MergeOptions{Markers: in.Markers, DryRun: in.DryRun})
	if err != nil {
		return mergeOut{}, err
	}
	out := mergeOut{Path: in.Path, Clean: res.Clean, Written: res.Written}
	for _, h := range res.Hunks {
		out.Hunks = append(out.Hunks, hunkOut{
			Sandbox: hunkSide{int(h.SandboxStart), int(h.SandboxLines), h.Sandbox},
			Base:    hunkSide{int(h.BaseStart), int(h.BaseLines), h.Base},
			Project: hunkSide{int(h.ProjectStart), int(h.ProjectLines), h.Project}})
	}
	if in.DryRun {
		out.Merged, _ = utf8Text(res.Merged)
	}
	switch {
	case res.Written && res.Clean:
		out.Notes = append(out.Notes, "the sandbox's file now holds the project's changes and its own: run the tests, then rebase or promote")
	case res.Written:
		out.Notes = append(out.Notes, "written with conflict markers around "+plural(len(res.Hunks), "hunk")+": edit them out, then run the tests")
	case res.Clean && !in.DryRun:
		out.Notes = append(out.Notes, "the sandbox's file holds the project's changes already: nothing written")
	case !res.Clean && !in.DryRun:
		out.Notes = append(out.Notes, plural(len(res.Hunks), "hunk")+" changed in both: the file is left as it was; edit it to hold both changes (file_write or file_edit), or merge again with markers")
	}
	return out, nil
}

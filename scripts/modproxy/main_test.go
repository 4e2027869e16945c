package main

import (
	"archive/zip"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeTree writes files (slash-separated name → content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readZip returns the sorted file names in the zip at path, and the
// content of the one whose name ends in "/LICENSE".
func readZip(t *testing.T, path string) (names []string, license string) {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		names = append(names, f.Name)
		if strings.HasSuffix(f.Name, "/LICENSE") {
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			license = string(b)
		}
	}
	slices.Sort(names)
	return names, license
}

func TestPublish(t *testing.T) {
	tests := []struct {
		name        string
		files       map[string]string
		wantLicense string // its content in the zip; "" for none
		wantZip     []string
	}{
		{
			name: "root LICENSE copied into a nested module",
			files: map[string]string{
				"LICENSE":        "root licence",
				"m/go.mod":       "module example.com/r/m\n\ngo 1.24\n",
				"m/a.go":         "package m\n",
				"m/sub/go.mod":   "module example.com/r/m/sub\n\ngo 1.24\n",
				"m/sub/b.go":     "package sub\n",
				"m/.git/config":  "x",
				"m/inner/c.go":   "package inner\n",
				"other/other.go": "package other\n",
			},
			wantLicense: "root licence",
			wantZip: []string{
				"example.com/r/m@v0.1.0/LICENSE",
				"example.com/r/m@v0.1.0/a.go",
				"example.com/r/m@v0.1.0/go.mod",
				"example.com/r/m@v0.1.0/inner/c.go",
			},
		},
		{
			name: "the module's own LICENSE wins",
			files: map[string]string{
				"LICENSE":   "root licence",
				"m/go.mod":  "module example.com/r/m\n\ngo 1.24\n",
				"m/LICENSE": "own licence",
				"m/a.go":    "package m\n",
			},
			wantLicense: "own licence",
			wantZip: []string{
				"example.com/r/m@v0.1.0/LICENSE",
				"example.com/r/m@v0.1.0/a.go",
				"example.com/r/m@v0.1.0/go.mod",
			},
		},
		{
			name: "no LICENSE anywhere",
			files: map[string]string{
				"m/go.mod": "module example.com/r/m\n\ngo 1.24\n",
				"m/a.go":   "package m\n",
			},
			wantLicense: "",
			wantZip: []string{
				"example.com/r/m@v0.1.0/a.go",
				"example.com/r/m@v0.1.0/go.mod",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, out := t.TempDir(), t.TempDir()
			writeTree(t, root, tt.files)
			path, hasLicense, err := publish(root, "m", "v0.1.0", out)
			if err != nil {
				t.Fatalf("publish = %v", err)
			}
			if path != "example.com/r/m" || hasLicense != (tt.wantLicense != "") {
				t.Errorf("publish = %q, license %v, want %q, license %v", path, hasLicense, "example.com/r/m", tt.wantLicense != "")
			}
			vdir := filepath.Join(out, "example.com", "r", "m", "@v")
			names, license := readZip(t, filepath.Join(vdir, "v0.1.0.zip"))
			if !slices.Equal(names, tt.wantZip) {
				t.Errorf("zip holds %q, want %q", names, tt.wantZip)
			}
			if license != tt.wantLicense {
				t.Errorf("zip's LICENSE = %q, want %q", license, tt.wantLicense)
			}
			for name, want := range map[string]string{"list": "v0.1.0\n", "v0.1.0.mod": tt.files["m/go.mod"]} {
				got, err := os.ReadFile(filepath.Join(vdir, name))
				if err != nil || string(got) != want {
					t.Errorf("%s = %q, %v, want %q", name, got, err, want)
				}
			}
			if _, err := os.Stat(filepath.Join(vdir, "v0.1.0.info")); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestPublishEscapesUpperCase(t *testing.T) {
	root, out := t.TempDir(), t.TempDir()
	writeTree(t, root, map[string]string{
		"LICENSE":  "root licence",
		"m/go.mod": "module example.com/Upper/m\n\ngo 1.24\n",
		"m/a.go":   "package m\n",
	})
	if _, _, err := publish(root, "m", "v0.1.0", out); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "example.com", "!upper", "m", "@v", "v0.1.0.zip")); err != nil {
		t.Errorf("escaped path: %v", err)
	}
}

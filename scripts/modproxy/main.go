// Command modproxy writes a file-based Go module proxy holding modules of
// this repository's working tree at one version, the way the go command
// would publish them from a tag, so that the release check can `go get`
// them with GOPROXY=file://DIR before anything is tagged.
//
//	go run . -root ../.. -version v0.1.0 -out /tmp/proxy core gin fiber
//
// Each argument is a module folder relative to -root. For every module it
// writes DIR/<escaped module path>/@v/{list,VERSION.info,VERSION.mod,
// VERSION.zip}, the layout GOPROXY=file://DIR reads. The zip is made by
// golang.org/x/mod/zip from every file in the folder (files of nested
// modules, vendor folders and irregular files are left out, as the go
// command leaves them out), plus the repository root's LICENSE when the
// folder has none: the go command does the same for a module in a
// subdirectory of its repository (cmd/go/internal/modfetch, codeRepo.Zip),
// so a zip made here holds what the public module proxy and pkg.go.dev will
// see.
//
// A module whose zip would hold no LICENSE is written anyway, reported on
// standard error, and makes the exit status 1.
package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

func main() {
	root := flag.String("root", ".", "repository root: the folder whose LICENSE nested modules get")
	version := flag.String("version", "", "version to publish every module at, such as v0.1.0")
	out := flag.String("out", "", "folder to write the proxy into")
	flag.Parse()
	if *out == "" || !semver.IsValid(*version) || semver.Canonical(*version) != *version || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: modproxy -root DIR -version vX.Y.Z -out DIR MODULE_FOLDER...")
		os.Exit(2)
	}
	failed := false
	for _, dir := range flag.Args() {
		path, hasLicense, err := publish(*root, dir, *version, *out)
		if err != nil {
			fmt.Fprintf(os.Stderr, "modproxy: %s: %v\n", dir, err)
			os.Exit(1)
		}
		if !hasLicense {
			fmt.Fprintf(os.Stderr, "modproxy: %s@%s: the zip holds no LICENSE (neither %s/LICENSE nor a LICENSE at the repository root)\n", path, *version, dir)
			failed = true
		}
		fmt.Printf("%s@%s\n", path, *version)
	}
	if failed {
		os.Exit(1)
	}
}

// publish writes the module in root/dir at version into the proxy at out,
// and returns its path and whether its zip holds a LICENSE.
func publish(root, dir, version, out string) (path string, hasLicense bool, err error) {
	modDir := filepath.Join(root, dir)
	gomod, err := os.ReadFile(filepath.Join(modDir, "go.mod"))
	if err != nil {
		return "", false, err
	}
	path = modfile.ModulePath(gomod)
	if path == "" {
		return "", false, errors.New("go.mod has no module line")
	}
	m := module.Version{Path: path, Version: version}
	files, err := moduleFiles(root, modDir)
	if err != nil {
		return path, false, err
	}
	var zbuf bytes.Buffer
	if err := modzip.Create(&zbuf, m, files); err != nil {
		return path, false, err
	}
	hasLicense, err = zipHas(zbuf.Bytes(), m, "LICENSE")
	if err != nil {
		return path, false, err
	}

	esc, err := module.EscapePath(path)
	if err != nil {
		return path, false, err
	}
	vdir := filepath.Join(out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return path, false, err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return path, false, err
	}
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": info,
		version + ".mod":  gomod,
		version + ".zip":  zbuf.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return path, false, err
		}
	}
	return path, hasLicense, nil
}

// moduleFiles lists every regular file under modDir, skipping .git and
// other dot folders; modzip.Create leaves out what does not belong in the
// module. If modDir has no LICENSE and root has one, it is added, as the go
// command adds it for a module in a subdirectory of its repository.
func moduleFiles(root, modDir string) ([]modzip.File, error) {
	var files []modzip.File
	haveLicense := false
	err := filepath.WalkDir(modDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != modDir && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(modDir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == "LICENSE" {
			haveLicense = true
		}
		files = append(files, diskFile{name: rel, path: p})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !haveLicense {
		same, err := sameDir(root, modDir)
		if err != nil {
			return nil, err
		}
		lic := filepath.Join(root, "LICENSE")
		if _, err := os.Stat(lic); err == nil && !same {
			files = append(files, diskFile{name: "LICENSE", path: lic})
		}
	}
	return files, nil
}

func sameDir(a, b string) (bool, error) {
	ai, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	bi, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(ai, bi), nil
}

// zipHas reports whether the module zip in data holds the file name at the
// module's root.
func zipHas(data []byte, m module.Version, name string) (bool, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return false, err
	}
	want := m.Path + "@" + m.Version + "/" + name
	for _, f := range zr.File {
		if f.Name == want {
			return true, nil
		}
	}
	return false, nil
}

// diskFile is a modzip.File read from disk under the name it has in the
// module.
type diskFile struct {
	name string // slash-separated, relative to the module root
	path string // on disk
}

func (f diskFile) Path() string                 { return f.name }
func (f diskFile) Lstat() (fs.FileInfo, error)  { return os.Lstat(f.path) }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.path) }

package segstore

import (
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestFaultFSDirectoryTrees: FaultFS follows a directory's files through a
// rename of the directory and forgets them at RemoveAll, durably at once,
// and an injected remove fault stops RemoveAll before it removes anything.
func TestFaultFSDirectoryTrees(t *testing.T) {
	tests := []struct {
		name string
		// act runs on the tree root/p/{a,sub/b,sub2}, its files written
		// and synced, and returns the error the test expects of it (nil
		// for success).
		act     func(f *FaultFS, root string) error
		wantErr error
		// wantFiles is what the tree holds after the crash: each file's
		// path relative to root and its content, the name it was
		// written under.
		wantFiles map[string]string
	}{
		{
			name:      "untouched",
			act:       func(*FaultFS, string) error { return nil },
			wantFiles: map[string]string{"p/a": "p/a", "p/sub/b": "p/sub/b", "p/sub2": "p/sub2"},
		},
		{
			name: "directory renamed",
			act: func(f *FaultFS, root string) error {
				if err := f.MkdirAll(filepath.Join(root, "trash"), 0o755); err != nil {
					return err
				}
				return f.Rename(filepath.Join(root, "p"), filepath.Join(root, "trash", "p.1"))
			},
			wantFiles: map[string]string{"trash/p.1/a": "p/a", "trash/p.1/sub/b": "p/sub/b", "trash/p.1/sub2": "p/sub2"},
		},
		{
			name:      "tree removed",
			act:       func(f *FaultFS, root string) error { return f.RemoveAll(filepath.Join(root, "p")) },
			wantFiles: map[string]string{},
		},
		{
			name: "subtree removed",
			act:  func(f *FaultFS, root string) error { return f.RemoveAll(filepath.Join(root, "p", "sub")) },
			// p/sub2 starts with p/sub but is not under it.
			wantFiles: map[string]string{"p/a": "p/a", "p/sub2": "p/sub2"},
		},
		{
			name: "remove fault",
			act: func(f *FaultFS, root string) error {
				f.Inject(Fault{Op: OpRemove, Path: "/p"})
				return f.RemoveAll(filepath.Join(root, "p"))
			},
			wantErr:   ErrInjected,
			wantFiles: map[string]string{"p/a": "p/a", "p/sub/b": "p/sub/b", "p/sub2": "p/sub2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			f, err := NewFaultFS(root)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.MkdirAll(filepath.Join(root, "p", "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"p/a", "p/sub/b", "p/sub2"} {
				file, err := f.OpenFile(filepath.Join(root, name), os.O_RDWR|os.O_CREATE, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := file.WriteAt([]byte(name), 0); err != nil {
					t.Fatal(err)
				}
				if err := file.Sync(); err != nil {
					t.Fatal(err)
				}
				file.Close()
			}
			if err := f.SyncDir(filepath.Join(root, "p")); err != nil {
				t.Fatal(err)
			}
			if err := f.SyncDir(filepath.Join(root, "p", "sub")); err != nil {
				t.Fatal(err)
			}
			if err := tt.act(f, root); !errors.Is(err, tt.wantErr) {
				t.Fatalf("got error %v, want %v", err, tt.wantErr)
			}
			f.Crash()
			post := filepath.Join(t.TempDir(), "post")
			if err := f.Reconstruct(post, rand.New(rand.NewPCG(1, 2))); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			err = filepath.WalkDir(post, func(path string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(post, path)
				content, err := os.ReadFile(path)
				got[rel] = string(content)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tt.wantFiles) {
				t.Errorf("after the crash: %v, want %v", got, tt.wantFiles)
			}
		})
	}
}

//go:build wasip1

// Command fsprobe exercises the file system of a WASI guest and prints one
// line per step, for wasi's end-to-end tests:
//
//	fsprobe basic           files, directories, listings, escapes
//	fsprobe read PATH...    try to read each path
//	fsprobe write PATH...   try to create each path with a short content
//	fsprobe fill PATH N     try to write N bytes to PATH in one write
package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Println("usage: fsprobe basic|read|write|fill ...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "basic":
		basic()
	case "read":
		for _, p := range os.Args[2:] {
			b, err := os.ReadFile(p)
			if err != nil {
				fmt.Printf("read %s: %s\n", p, kind(err))
			} else {
				fmt.Printf("read %s: %q\n", p, b)
			}
		}
	case "write":
		for _, p := range os.Args[2:] {
			fmt.Printf("write %s: %s\n", p, kind(os.WriteFile(p, []byte("written by the guest"), 0o644)))
		}
	case "fill":
		n, _ := strconv.Atoi(os.Args[3])
		fill(os.Args[2], n)
	default:
		fmt.Println("unknown command", os.Args[1])
		os.Exit(2)
	}
}

// kind names an error by its errno, "ok" for nil.
func kind(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		for _, e := range []struct {
			errno syscall.Errno
			name  string
		}{
			{syscall.ENOENT, "ENOENT"}, {syscall.EEXIST, "EEXIST"}, {syscall.ENOTDIR, "ENOTDIR"},
			{syscall.EISDIR, "EISDIR"}, {syscall.ENOTEMPTY, "ENOTEMPTY"}, {syscall.EROFS, "EROFS"},
			{syscall.EIO, "EIO"}, {syscall.EPERM, "EPERM"}, {syscall.ENOSYS, "ENOSYS"},
			{syscall.ELOOP, "ELOOP"}, {syscall.EBADF, "EBADF"}, {syscall.EINVAL, "EINVAL"},
			{syscall.ENOTCAPABLE, "ENOTCAPABLE"}, {syscall.EACCES, "EACCES"}, {syscall.ENOSPC, "ENOSPC"},
		} {
			if errno == e.errno {
				return e.name
			}
		}
		return fmt.Sprintf("errno %d", int(errno))
	}
	return "error " + err.Error()
}

func step(name string, err error) {
	fmt.Printf("%s: %s\n", name, kind(err))
}

func basic() {
	step("mkdirall /work/sub/deep", os.MkdirAll("/work/sub/deep", 0o755))
	step("mkdir /work/sub again", os.Mkdir("/work/sub", 0o755))
	step("write /work/sub/a.txt", os.WriteFile("/work/sub/a.txt", []byte("hello"), 0o644))
	b, err := os.ReadFile("/work/sub/a.txt")
	fmt.Printf("read /work/sub/a.txt: %s %q\n", kind(err), b)

	f, err := os.OpenFile("/work/sub/a.txt", os.O_WRONLY|os.O_APPEND, 0)
	step("open for append", err)
	if err == nil {
		_, err = f.Write([]byte(", world"))
		step("append", err)
		step("close", f.Close())
	}
	b, err = os.ReadFile("/work/sub/a.txt")
	fmt.Printf("read after append: %s %q\n", kind(err), b)

	f, err = os.Open("/work/sub/a.txt")
	if err == nil {
		buf := make([]byte, 5)
		n, err := f.ReadAt(buf, 7)
		fmt.Printf("pread at 7: %s %q\n", kind(err), buf[:n])
		off, err := f.Seek(-5, io.SeekEnd)
		fmt.Printf("seek end-5: %s %d\n", kind(err), off)
		n, err = f.Read(buf)
		fmt.Printf("read after seek: %s %q\n", kind(err), buf[:n])
		f.Close()
	}

	st, err := os.Stat("/work/sub/a.txt")
	if err == nil {
		sys := st.Sys().(*syscall.Stat_t)
		fmt.Printf("stat: size %d regular %v ino-nonzero %v\n", st.Size(), st.Mode().IsRegular(), sys.Ino != 0)
	} else {
		step("stat", err)
	}

	step("rename a.txt to /work/b.txt", os.Rename("/work/sub/a.txt", "/work/b.txt"))
	_, err = os.Stat("/work/sub/a.txt")
	step("stat old name", err)
	step("truncate /work/b.txt to 5", os.Truncate("/work/b.txt", 5))
	b, err = os.ReadFile("/work/b.txt")
	fmt.Printf("read /work/b.txt: %s %q\n", kind(err), b)

	ents, err := os.ReadDir("/work")
	fmt.Printf("ls /work: %s %s\n", kind(err), names(ents))

	// Enough entries with long names that fd_readdir needs several calls,
	// resuming from cookies.
	const many = 300
	for i := 0; i < many; i++ {
		name := fmt.Sprintf("/work/many/entry-with-a-long-name-%04d", i)
		if i == 0 {
			step("mkdir /work/many", os.Mkdir("/work/many", 0o755))
		}
		if err := os.WriteFile(name, nil, 0o644); err != nil {
			step("create "+name, err)
			break
		}
	}
	ents, err = os.ReadDir("/work/many")
	sorted := sort.SliceIsSorted(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	unique := map[string]bool{}
	for _, e := range ents {
		unique[e.Name()] = true
	}
	fmt.Printf("ls /work/many: %s count %d unique %d sorted %v\n", kind(err), len(ents), len(unique), sorted)
	d, err := os.Open("/work/many")
	if err == nil {
		first, err1 := d.Readdirnames(10)
		_, err2 := d.Seek(0, io.SeekStart)
		again, err3 := d.Readdirnames(10)
		fmt.Printf("rewind: %s %s %s same %v\n", kind(err1), kind(err2), kind(err3), strings.Join(first, ",") == strings.Join(again, ","))
		d.Close()
	}

	step("remove non-empty /work/many", syscall.Rmdir("/work/many"))
	step("removeall /work/many", os.RemoveAll("/work/many"))
	step("remove /work/sub/deep", os.Remove("/work/sub/deep"))
	step("remove missing", os.Remove("/work/missing"))
	step("rmdir a file", syscall.Rmdir("/work/b.txt"))
	step("unlink a directory", syscall.Unlink("/work/sub"))
	step("create under a file", os.WriteFile("/work/b.txt/x", nil, 0o644))
	_, err = os.OpenFile("/work/b.txt", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	step("create exclusive existing", err)

	// Escapes: relative paths above the root, and links.
	for _, p := range []string{"../../etc/passwd", "/../../etc/passwd", "/work/../../../etc/passwd"} {
		_, err := os.ReadFile(p)
		step("read "+p, err)
	}
	// WASI refuses absolute targets (EPERM); a link the host made with one
	// is read through all the same.
	err = os.Symlink("/etc", "/work/etc")
	step("symlink /work/etc -> /etc", err)
	if fi, lerr := os.Lstat("/work/etc"); err == nil || lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
		_, err = os.ReadFile("/work/etc/passwd")
		step("read /work/etc/passwd", err)
	}
	err = os.Symlink("../../../../..", "/work/up")
	step("symlink /work/up -> ../../../../..", err)
	if err == nil {
		ents, err := os.ReadDir("/work/up")
		fmt.Printf("ls /work/up: %s %s\n", kind(err), names(ents))
	}

	ents, err = os.ReadDir("/")
	fmt.Printf("ls /: %s %s\n", kind(err), names(ents))
}

// fill writes n bytes to path in one write call and reports what is left.
func fill(path string, n int) {
	f, err := os.Create(path)
	if err != nil {
		step("create "+path, err)
		return
	}
	written, err := f.Write(make([]byte, n))
	fmt.Printf("write %d bytes: %s written %d\n", n, kind(err), written)
	f.Close()
	st, err := os.Stat(path)
	if err != nil {
		step("stat", err)
		return
	}
	fmt.Printf("size after: %d\n", st.Size())
}

func names(ents []fs.DirEntry) string {
	var out []string
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() {
			n += "/"
		} else if e.Type()&fs.ModeSymlink != 0 {
			n += "@"
		}
		out = append(out, n)
	}
	return "[" + strings.Join(out, " ") + "]"
}

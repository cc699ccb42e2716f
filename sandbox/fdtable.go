package sandbox

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"reflect"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental/sys"
)

// fdTable is an instance's descriptor table: wazero keeps it on the host
// (its internal sys.FSContext) and offers no public way to list it or to
// open a file at a chosen number. Sessions need both, to carry open files
// across snapshots, forks, hibernation and rollbacks, so fdTable reaches it
// by reflection, through exported names only (ModuleInstance.Sys,
// Context.FS, FSContext.LookupFile, OpenFile, Renumber and CloseFile, the
// exported fields of FileEntry) and one unexported field it only reads
// (the table's occupancy masks). Any mismatch (another wazero version) is
// an error, never a panic; TestSessionOpenFiles* fail on one, so a wazero
// upgrade cannot break this silently.
type fdTable struct {
	fsc                                   reflect.Value // *sys.FSContext
	lookupFn, openFn, renumberFn, closeFn reflect.Value
	masksV                                reflect.Value // FSContext.openedFiles.masks, read only
}

// fdEntry is one open descriptor.
type fdEntry struct {
	fd        int32
	name      string // the path wazero opened, relative to the mount
	isPreopen bool
	fs        sys.FS
	file      sys.File
}

// errFDTable reports a wazero whose descriptor table is not what fdTable
// expects.
var errFDTable = errors.New("sandbox: cannot reach the runtime's descriptor table (an unexpected wazero version)")

// descriptorTable returns mod's descriptor table.
func descriptorTable(mod api.Module) (t *fdTable, err error) {
	defer func() {
		if p := recover(); p != nil {
			t, err = nil, fmt.Errorf("%w: %v", errFDTable, p)
		}
	}()
	v := reflect.ValueOf(mod)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, errFDTable
	}
	sysCtx := v.Elem().FieldByName("Sys")
	if !sysCtx.IsValid() || sysCtx.Kind() != reflect.Pointer || sysCtx.IsNil() {
		return nil, errFDTable
	}
	fsMethod := sysCtx.MethodByName("FS")
	if !fsMethod.IsValid() {
		return nil, errFDTable
	}
	out := fsMethod.Call(nil)
	if len(out) != 1 || out[0].Kind() != reflect.Pointer || out[0].IsNil() {
		return nil, errFDTable
	}
	t = &fdTable{fsc: out[0]}
	for name, fn := range map[string]*reflect.Value{"LookupFile": &t.lookupFn, "OpenFile": &t.openFn, "Renumber": &t.renumberFn, "CloseFile": &t.closeFn} {
		if *fn = t.fsc.MethodByName(name); !fn.IsValid() {
			return nil, fmt.Errorf("%w: no FSContext.%s", errFDTable, name)
		}
	}
	files := t.fsc.Elem().FieldByName("openedFiles")
	if !files.IsValid() || files.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: no FSContext.openedFiles", errFDTable)
	}
	t.masksV = files.FieldByName("masks")
	if !t.masksV.IsValid() || t.masksV.Kind() != reflect.Slice || t.masksV.Type().Elem().Kind() != reflect.Uint64 {
		return nil, fmt.Errorf("%w: no descriptor.Table.masks", errFDTable)
	}
	return t, nil
}

// masks returns the table's occupancy bits: bit j of masks[i] is set when
// descriptor 64*i+j is open.
func (t *fdTable) masks() ([]uint64, error) {
	// The slice header is read again each time: the table grows.
	m := t.masksV
	out := make([]uint64, m.Len())
	for i := range out {
		out[i] = m.Index(i).Uint()
	}
	return out, nil
}

// lookup returns the descriptor fd, if open.
func (t *fdTable) lookup(fd int32) (e fdEntry, ok bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			ok, err = false, fmt.Errorf("%w: %v", errFDTable, p)
		}
	}()
	out := t.lookupFn.Call([]reflect.Value{reflect.ValueOf(fd)})
	if len(out) != 2 || !out[1].Bool() {
		return fdEntry{}, false, nil
	}
	fe := out[0]
	if fe.Kind() != reflect.Pointer || fe.IsNil() {
		return fdEntry{}, false, errFDTable
	}
	s := fe.Elem()
	e = fdEntry{fd: fd, name: s.FieldByName("Name").String(), isPreopen: s.FieldByName("IsPreopen").Bool()}
	if v := s.FieldByName("FS"); v.IsValid() && !v.IsNil() {
		e.fs, _ = v.Interface().(sys.FS)
	}
	if v := s.FieldByName("File"); v.IsValid() && !v.IsNil() {
		e.file, _ = v.Interface().(sys.File)
	}
	return e, true, nil
}

// list returns every open descriptor, in increasing order.
func (t *fdTable) list() (entries []fdEntry, err error) {
	masks, err := t.masks()
	if err != nil {
		return nil, err
	}
	for i, m := range masks {
		for j := 0; j < 64 && m != 0; j++ {
			if m&(1<<j) == 0 {
				continue
			}
			m &^= 1 << j
			e, ok, err := t.lookup(int32(i*64 + j))
			if err != nil {
				return nil, err
			}
			if ok {
				entries = append(entries, e)
			}
		}
	}
	return entries, nil
}

// openAt opens name in fsys with flag at descriptor fd, which must be free
// (a preopen there, which the guest had closed before, is closed first).
func (t *fdTable) openAt(fd int32, fsys sys.FS, name string, flag sys.Oflag) (errno sys.Errno, err error) {
	defer func() {
		if p := recover(); p != nil {
			errno, err = 0, fmt.Errorf("%w: %v", errFDTable, p)
		}
	}()
	if old, ok, err := t.lookup(fd); err != nil {
		return 0, err
	} else if ok {
		if !old.isPreopen {
			return sys.EBADF, nil
		}
		t.closeFn.Call([]reflect.Value{reflect.ValueOf(fd)})
	}
	out := t.openFn.Call([]reflect.Value{
		reflect.ValueOf(&fsys).Elem(), reflect.ValueOf(name), reflect.ValueOf(flag), reflect.ValueOf(iofs.FileMode(0)),
	})
	if len(out) != 2 {
		return 0, errFDTable
	}
	got, _ := out[0].Interface().(int32)
	if errno, _ = out[1].Interface().(sys.Errno); errno != 0 {
		return errno, nil
	}
	if got == fd {
		return 0, nil
	}
	out = t.renumberFn.Call([]reflect.Value{reflect.ValueOf(got), reflect.ValueOf(fd)})
	if errno, _ = out[0].Interface().(sys.Errno); errno != 0 {
		t.closeFn.Call([]reflect.Value{reflect.ValueOf(got)})
		return errno, nil
	}
	return 0, nil
}

// closeFD closes descriptor fd.
func (t *fdTable) closeFD(fd int32) (errno sys.Errno, err error) {
	defer func() {
		if p := recover(); p != nil {
			errno, err = 0, fmt.Errorf("%w: %v", errFDTable, p)
		}
	}()
	out := t.closeFn.Call([]reflect.Value{reflect.ValueOf(fd)})
	errno, _ = out[0].Interface().(sys.Errno)
	return errno, nil
}

//go:build !linux

package memlimit

import "errors"

// pageOutProgram is Linux's alone (madvise MADV_PAGEOUT).
func pageOutProgram() (int64, error) {
	return 0, errors.New("paging out the program's file is Linux's alone")
}

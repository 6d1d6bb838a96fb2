package tools

import "context"

// The file tools are being written; until then they refuse.

func (r *Runner) readFile(ctx context.Context, a map[string]any) Result {
	return fail("read_file is not implemented yet.")
}
func (r *Runner) listDir(ctx context.Context, a map[string]any) Result {
	return fail("list_dir is not implemented yet.")
}
func (r *Runner) findFiles(ctx context.Context, a map[string]any) Result {
	return fail("find_files is not implemented yet.")
}
func (r *Runner) grep(ctx context.Context, a map[string]any) Result {
	return fail("grep is not implemented yet.")
}
func (r *Runner) writeFile(ctx context.Context, a map[string]any) Result {
	return fail("write_file is not implemented yet.")
}
func (r *Runner) editFile(ctx context.Context, a map[string]any) Result {
	return fail("edit_file is not implemented yet.")
}
func (r *Runner) applyPatch(ctx context.Context, a map[string]any) Result {
	return fail("apply_patch is not implemented yet.")
}

"""The cache key follows the library code a task runs, not just the task's own few lines."""

from tasks._cache import library_closure


def test_closure_follows_forge_imports_transitively():
    closure = library_closure(("forge.training.sft",))
    assert "forge.training.sft" in closure
    assert "forge.training.checkpoints" in closure  # imported by sft: a change to it must invalidate SFT
    assert "forge.data.schemas" in closure  # imported through forge.training.tokenizer and forge.chat
    assert not any(name.startswith(("transformers", "trl", "torch")) for name in closure)


def test_closure_of_unrelated_module_excludes_training():
    assert not any("training" in name for name in library_closure(("forge.data.calc",)))


def test_configs_are_keyed_by_value_not_by_source():
    """Editing forge/config.py (a new section) must not retrain the base: configs enter keys as input values."""
    closure = library_closure(("forge.training.base_model",))
    assert "forge.training.base_model" in closure and "forge.config" not in closure


def test_a_file_edited_in_a_running_process_is_parsed_again(tmp_path):
    """The parsed imports are kept per version of a file (a long-lived worker computes many keys): an edit that
    changes what a module imports changes its closure in the same process."""
    import os

    from tasks._cache import _library_imports

    source = tmp_path / "stage.py"
    source.write_text("from forge.usage import UsageMeter\n")
    stat = os.stat(source)
    assert _library_imports(str(source), stat.st_mtime_ns, stat.st_size) == ("forge.usage",)
    source.write_text("import forge.hashing\nimport json\n")
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    stat = os.stat(source)
    assert _library_imports(str(source), stat.st_mtime_ns, stat.st_size) == ("forge.hashing",)


def test_the_closure_is_found_without_importing_the_library():
    """A cache key must not run the library: resolving ``forge.x.y.Name`` through importlib would import forge.x.y
    (seconds for the training stack, counted as Prefect time in every stage's wall)."""
    import subprocess
    import sys

    probe = ("import sys; from tasks._cache import library_closure; "
             "c = library_closure(('forge.training.grpo', 'forge.code.rewards')); "
             "assert 'forge.training.checkpoints' in c and 'forge.code.sandbox' in c, c; "
             "print(sorted(m for m in sys.modules if m.startswith(('forge.training', 'forge.code', 'torch', "
             "'transformers'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_import_statements_are_found_at_any_depth_and_across_lines():
    from tasks._cache import import_statements

    source = '''"""Docs: from the reference on, import nothing."""
import json
def f():
    from forge.code.judge import (
        judge_correctness,
        JudgeResult,
    )
    if True:
        import forge.hashing as h
'''
    names = [getattr(s, "module", None) or s.names[0].name for s in import_statements(source)]
    assert names == ["json", "forge.code.judge", "forge.hashing"]
    assert [a.name for a in import_statements(source)[1].names] == ["judge_correctness", "JudgeResult"]

#!/usr/bin/env python3
"""scripts/check-layers.py: no #include crosses the layer rule.

The rule is ARCHITECTURE.md's: cmd -> nbd, formats, block; nbd -> block;
formats -> block; every folder -> common; nothing but cmd/ includes cmd/.
What each layer may use is read from layers/NAME/ (links to the folders
its library compiles with, see meson.build), so the rule is stated once
for the compiler and for this check.  The build already refuses most
crossings (the folder is not on the include path); this check also sees
what the compiler cannot: a relative "../nbd/x.h", and cmd/ and tests/,
which compile with every layer.  Not a check of calls: the link checks
(layer-check-NAME in meson.build) do that.

Usage: scripts/check-layers.py [SOURCE_ROOT]   (exit 1 on a crossing)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')


def allowed_folders(root):
    """Map each top-level folder with C code to the folders it may include."""
    layers_dir = os.path.join(root, 'layers')
    allowed = {}
    for layer in sorted(os.listdir(layers_dir)):
        view = os.path.join(layers_dir, layer)
        if os.path.isdir(view) and not os.path.islink(view):
            allowed[layer] = set(os.listdir(view))
    every_layer = set().union(*allowed.values())
    allowed['cmd'] = every_layer | {'cmd'}
    allowed['tests'] = every_layer | {'tests'}
    return allowed


def included_folder(root, source, name):
    """The top-level folder an #include names, or None for a system header."""
    beside = os.path.normpath(os.path.join(os.path.dirname(source), name))
    if os.path.exists(beside):
        target = os.path.relpath(beside, root)
    else:
        target = os.path.normpath(name)
    top = target.split(os.sep)[0]
    return None if top in ('.', '..') else top


def check(root):
    allowed = allowed_folders(root)
    folders = set(allowed)
    errors = 0
    for folder in sorted(folders):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, folder)):
            dirnames.sort()
            for filename in sorted(filenames):
                if not filename.endswith(('.c', '.h')):
                    continue
                source = os.path.join(dirpath, filename)
                with open(source, encoding='utf-8', errors='replace') as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        top = included_folder(root, source, m.group(1))
                        if top in folders and top not in allowed[folder]:
                            print(f'{os.path.relpath(source, root)}:{lineno}: '
                                  f'{folder}/ may not include {m.group(1)} '
                                  f'({folder}/ may use: {", ".join(sorted(allowed[folder]))})')
                            errors += 1
    return errors


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), '..'))
    errors = check(root)
    if errors:
        print(f'check-layers: {errors} #include across the layer rule (ARCHITECTURE.md)')
        return 1
    print('check-layers: no #include crosses the layer rule')
    return 0


if __name__ == '__main__':
    sys.exit(main())

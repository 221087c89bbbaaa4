"""Builds shardload._shardload with the project's CMake (Release, no tests) for the interpreter running
pip, and puts it beside the pure-Python modules of python/shardload."""
import os
import pathlib
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        target = pathlib.Path(self.get_ext_fullpath(ext.name)).resolve()
        build = pathlib.Path(self.build_temp).resolve() / "cmake"
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                        "-DSHARDLOAD_TESTS=OFF", "-DSHARDLOAD_BENCH=OFF", "-DSHARDLOAD_DEMO_MODEL=OFF",
                        "-DSHARDLOAD_FAULT_INJECTION=OFF", f"-DPython3_EXECUTABLE={sys.executable}"], check=True)
        jobs = str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build), "--target", "shardload_python", "-j", jobs], check=True)
        built = next((build / "python" / "shardload").glob("_shardload*.so"))
        target.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(built), str(target))


setup(ext_modules=[CMakeExtension("shardload._shardload")], cmdclass={"build_ext": CMakeBuild})

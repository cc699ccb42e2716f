# fumehood: when http.client is imported, route it through the host (see
# fumehood/_httpclient.py). Nothing else is imported at start-up.
import sys


class _Loader:
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        from fumehood._httpclient import patch

        patch(module)


class _Finder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "http.client":
            return None
        for finder in sys.meta_path:
            if finder is cls or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return None


sys.meta_path.insert(0, _Finder)

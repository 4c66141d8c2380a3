"""The deep-link workaround (``dcsim.ui.router``) rests on three private details of Streamlit.
Each is checked here by name, so an upgrade that moves one fails loudly here instead of quietly
breaking shared deep links on a fresh server, or every AppTest after its first run."""

import inspect

from streamlit.commands import navigation
from streamlit.runtime.pages_manager import PagesManager
from streamlit.testing.v1 import app_test

from dcsim.ui import router


def test_the_v1_switch_is_a_class_attribute_of_pages_manager():
    assert "uses_pages_directory" in vars(PagesManager), "PagesManager.uses_pages_directory moved"
    assert PagesManager.uses_pages_directory in (None, True, False)


def test_st_navigation_still_clears_the_switch_as_require_router_does():
    source = inspect.getsource(navigation)
    assert "PagesManager.uses_pages_directory = False" in source, (
        "st.navigation no longer clears PagesManager.uses_pages_directory: require_router's premise changed"
    )


def test_apptest_still_builds_its_pages_manager_by_that_name():
    assert app_test.PagesManager is router.NavigationPagesManager or app_test.PagesManager is PagesManager, (
        "AppTest no longer names PagesManager: tests cannot hand it NavigationPagesManager"
    )
    assert "PagesManager(" in inspect.getsource(app_test), "AppTest no longer builds a PagesManager"


def test_navigation_pages_manager_clears_the_switch(monkeypatch):
    monkeypatch.setattr(PagesManager, "uses_pages_directory", True)
    router.NavigationPagesManager(str(router.__file__))
    assert PagesManager.uses_pages_directory is False

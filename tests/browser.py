"""A real headless browser for UI tests: the system Chromium (Debian's ``chromium`` and
``chromium-driver``, installed by ``make install-test``) driven by Selenium. Screenshots go to
``test-artifacts/<area>/`` (git-ignored) for a person to look at."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Callable

from tests.helpers import REPO

ARTIFACTS = REPO / "test-artifacts"


def chromium_paths() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def start_chromium(width: int = 1600, height: int = 1000):
    """A headless Chromium session (the caller quits it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    paths = chromium_paths()
    assert paths is not None, "chromium and chromedriver are not installed (make install-test)"
    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--lang=en-US", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    options.binary_location = paths[0]
    driver = webdriver.Chrome(service=Service(paths[1]), options=options)
    driver.set_page_load_timeout(60)
    return driver


def body_text(driver) -> str:
    return driver.find_element("tag name", "body").text


def wait_for(driver, predicate: Callable[[], object], what: str, timeout: float = 30.0):
    """Poll ``predicate`` until it returns something truthy; fail naming ``what`` and the page text."""
    end = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < end:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # the page is still rendering
            last_error = exc
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what} ({last_error!r}); page shows:\n{body_text(driver)[:3000]}")


def wait_for_text(driver, *texts: str, timeout: float = 30.0) -> str:
    return wait_for(driver, lambda: (lambda b: b if all(t in b for t in texts) else None)(body_text(driver)),
                    f"the page to show {texts!r}", timeout)


def click_text(driver, text: str, tag: str = "*") -> bool:
    """Click the first visible element whose own text is ``text``; False if there is none."""
    for el in driver.find_elements("xpath", f"//{tag}[normalize-space(text())={_xpath_literal(text)}]"):
        if el.is_displayed():
            driver.execute_script("arguments[0].click()", el)
            return True
    return False


def screenshot(driver, area: str, name: str) -> Path:
    folder = ARTIFACTS / area
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def _xpath_literal(s: str) -> str:
    if "'" not in s:
        return f"'{s}'"
    if '"' not in s:
        return f'"{s}"'
    return "concat(" + ", \"'\", ".join(f"'{p}'" for p in s.split("'")) + ")"

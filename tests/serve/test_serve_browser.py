"""The web page in a real headless Chromium (Debian's `chromium` + `chromium-driver`, driven by selenium): type a
caption and see the right photo first, upload a photo, click "more like this", see a bad upload's message.
Skips cleanly where no browser is installed (`.ci/run` installs one)."""
from __future__ import annotations

import shutil

import pytest

pytest.importorskip("fastapi")
webdriver = pytest.importorskip("selenium.webdriver")
import serve_fixtures
from PIL import Image, ImageStat

from engine.serve.options import ServeOptions
from engine.serve.server import running

served_root = serve_fixtures.served_root

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture()
def browser():
    binary = next((b for b in map(shutil.which, BROWSERS) if b), None)
    driver_path = shutil.which("chromedriver")
    if not binary or not driver_path:
        pytest.skip("no chromium/chromedriver installed (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver, condition, timeout: float = 60):
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition)


def first_hit(driver) -> str | None:
    hits = driver.find_elements("css selector", "#results .hit")
    return hits[0].get_attribute("data-id") if hits else None


def test_search_upload_more_like_this_and_a_bad_upload(browser, served_root, sample_photos, tmp_path):
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select
    with running(ServeOptions(root=served_root)) as url:
        browser.get(url + "/")
        wait(browser, lambda d: "demo" in [o.get_attribute("value") for o in
                                           d.find_elements("css selector", "#collection option")])
        Select(browser.find_element("id", "collection")).select_by_value("demo")
        Select(browser.find_element("id", "k")).select_by_visible_text("5")

        query = browser.find_element("id", "query")
        query.send_keys("a cat", Keys.ENTER)
        wait(browser, lambda d: first_hit(d) == "chelsea")
        assert len(browser.find_elements("css selector", "#results .hit")) == 5
        assert "ms" in browser.find_element("id", "status").text
        wait(browser, lambda d: d.execute_script(
            "return [...document.querySelectorAll('#results img')].every(i => i.complete && i.naturalWidth > 0)"))

        browser.find_element("id", "file").send_keys(str(sample_photos["rocket"]))
        wait(browser, lambda d: "rocket.jpg" in d.find_element("id", "status").text)
        assert first_hit(browser) == "rocket"

        second = browser.find_elements("css selector", "#results .hit")[1]
        target = second.get_attribute("data-id")
        second.click()
        wait(browser, lambda d: f"more like {target}" in d.find_element("id", "status").text)
        assert first_hit(browser) == target
        wait(browser, lambda d: d.execute_script(
            "return [...document.querySelectorAll('#results img')].every(i => i.complete && i.naturalWidth > 0)"))
        shot = tmp_path / "page.png"
        assert browser.save_screenshot(str(shot))

        bad = tmp_path / "holiday.png"
        bad.write_text("this is not a picture")
        browser.find_element("id", "file").send_keys(str(bad))
        error = browser.find_element("id", "error")
        wait(browser, lambda d: error.is_displayed() and "not an image" in error.text)
        browser.save_screenshot(str(tmp_path / "error.png"))

    image = Image.open(shot).convert("RGB")
    assert image.size[0] >= 1000
    spread = ImageStat.Stat(image.convert("L")).stddev[0]
    colours = len(image.getcolors(maxcolors=1 << 20) or [])
    assert spread > 20 and colours > 1000, (spread, colours)  # photos on the page, not a blank screen

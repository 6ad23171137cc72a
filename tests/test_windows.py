"""Maintenance windows of the driver rollout (components/providers/windows.py): open, closed, when next, across
midnight, time zones and daylight-saving changes."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from components.providers.windows import window_state

SHANGHAI = ZoneInfo("Asia/Shanghai")
WEEKEND_NIGHTS = [{"days": ["Sat", "Sun"], "start": "01:00", "end": "05:00", "timeZone": "Asia/Shanghai"}]


def at(text: str, zone=timezone.utc) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=zone)


def test_no_windows_is_always_open():
    state = window_state([], at("2026-11-25T12:00"))
    assert state.open and state.closes is None and state.describe() == "in a maintenance window"


def test_inside_a_window_it_says_when_it_closes():
    # Saturday 2026-11-28 02:30 in Shanghai is Friday 18:30 UTC.
    state = window_state(WEEKEND_NIGHTS, at("2026-11-27T18:30"))
    assert state.open and state.closes == at("2026-11-28T05:00", SHANGHAI)
    assert state.describe() == "in a maintenance window until Sat 2026-11-28 05:00 Asia/Shanghai (2026-11-27T21:00Z)"


def test_outside_it_says_when_the_next_opens_in_the_windows_zone():
    # Wednesday noon UTC: the next window is Saturday 01:00 in Shanghai, Friday 17:00 UTC.
    state = window_state(WEEKEND_NIGHTS, at("2026-11-25T12:00"))
    assert not state.open and state.opens == at("2026-11-28T01:00", SHANGHAI)
    assert state.describe() == ("outside the maintenance windows; the next opens Sat 2026-11-28 01:00 Asia/Shanghai "
                                "(2026-11-27T17:00Z)")
    # The end is exclusive, the start inclusive.
    assert not window_state(WEEKEND_NIGHTS, at("2026-11-28T05:00", SHANGHAI)).open
    assert window_state(WEEKEND_NIGHTS, at("2026-11-28T01:00", SHANGHAI)).open


def test_a_window_across_midnight_belongs_to_the_day_it_starts():
    friday_night = [{"days": ["Fri"], "start": "22:00", "end": "02:00"}]
    assert window_state(friday_night, at("2026-11-28T01:30")).open   # Saturday 01:30: Friday's window
    assert not window_state(friday_night, at("2026-11-27T01:30")).open   # Friday 01:30: Thursday had none
    assert window_state(friday_night, at("2026-11-27T23:00")).closes == at("2026-11-28T02:00")
    whole_day = [{"days": ["Wed"], "start": "00:00", "end": "24:00"}]
    assert window_state(whole_day, at("2026-11-25T23:59")).closes == at("2026-11-26T00:00")


def test_overlapping_windows_hold_until_the_last_closes_and_the_earliest_opens_next():
    windows = [{"start": "01:00", "end": "03:00"}, {"start": "02:00", "end": "06:00", "days": ["Mon"]}]
    assert window_state(windows, at("2026-11-23T02:30")).closes == at("2026-11-23T06:00")   # a Monday
    assert window_state(windows, at("2026-11-24T12:00")).opens == at("2026-11-25T01:00")


def test_daylight_saving_changes_keep_local_times():
    berlin = ZoneInfo("Europe/Berlin")
    nights = [{"start": "01:00", "end": "04:00", "timeZone": "Europe/Berlin"}]
    # 2026-10-25: clocks go back at 03:00 CEST; the window still closes at 04:00 local (03:00 UTC, four hours long).
    state = window_state(nights, at("2026-10-25T00:30"))
    assert state.open and state.closes == at("2026-10-25T04:00", berlin)
    assert state.closes.astimezone(timezone.utc) == at("2026-10-25T03:00")
    # 2026-03-29: clocks go forward at 02:00; 01:00 local is 00:00 UTC.
    assert window_state(nights, at("2026-03-28T23:30")).opens.astimezone(timezone.utc) == at("2026-03-29T00:00")


def test_the_gate_stops_new_waves_outside_the_windows_and_after_max_duration():
    from components.providers.driver_rollout import wave_gate

    tuesday_noon = at("2026-11-24T12:00").timestamp()
    props = {"windows": [{"days": ["Tue"], "start": "11:00", "end": "13:00"}], "maxDurationMinutes": 30}
    assert wave_gate(props, started=tuesday_noon, now=lambda: tuesday_noon + 60) is None
    assert wave_gate(props, started=tuesday_noon, now=lambda: tuesday_noon + 1800) == "maxDurationMinutes (30) reached"
    closed = wave_gate({**props, "maxDurationMinutes": None}, started=tuesday_noon, now=lambda: tuesday_noon + 3600)
    assert closed.startswith("outside the maintenance windows; the next opens Tue 2026-12-01 11:00 UTC")
    assert wave_gate({}, started=0, now=lambda: tuesday_noon) is None


def test_the_preview_says_when_waves_may_start():
    from components.providers.driver_rollout import windows_note

    assert windows_note(None, None) is None
    assert windows_note(None, 45) == "waves start now; none starts more than 45 minute(s) into the rollout"
    wednesday = at("2026-11-25T12:00")
    assert windows_note(WEEKEND_NIGHTS, None, wednesday) == (
        "no wave starts now: outside the maintenance windows; the next opens Sat 2026-11-28 01:00 Asia/Shanghai "
        "(2026-11-27T17:00Z); `pulumi up` then does the rest and the next one in a window continues")
    assert windows_note(WEEKEND_NIGHTS, None, at("2026-11-27T18:30")).startswith("waves start now: in a maintenance window until Sat")

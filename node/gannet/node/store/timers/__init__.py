"""The timers room: delayed delivery (RocketMQ ``TimerMessageStore``).

On-disk codecs, the wheel and timer-log files, the timer store over them, and delivery (routing
a message to the timer topic, parking it, firing it back). Imports the log room.
"""

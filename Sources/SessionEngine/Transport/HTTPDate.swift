import Foundation

/// HTTP's date formats (RFC 9110, section 5.6.7), parsed without a locale-dependent formatter.
///
/// Recipients must accept all three: the preferred IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) and the obsolete
/// RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6 08:49:37 1994`) forms.
enum HTTPDate {
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    /// The instant an HTTP date names, or `nil` when the text is not one.
    static func parse(_ text: String) -> Date? {
        let words = text.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        var day: Int?
        var month: Int?
        var year: Int?
        var time: String?
        if words.count == 6, words[5] == "GMT", words[0].hasSuffix(",") {
            // IMF-fixdate.
            (day, month, year, time) = (Int(words[1]), monthNumber(words[2]), Int(words[3]), words[4])
        } else if words.count == 4, words[3] == "GMT", words[0].hasSuffix(",") {
            // RFC 850: a two-digit year; RFC 9110 reads years more than 50 years ahead as the past century.
            let parts = words[1].split(separator: "-").map(String.init)
            guard parts.count == 3, let short = Int(parts[2]), parts[2].count == 2 else { return nil }
            (day, month, time) = (Int(parts[0]), monthNumber(parts[1]), words[2])
            let current = Calendar(identifier: .gregorian).component(.year, from: Date())
            var full = current / 100 * 100 + short
            if full > current + 50 { full -= 100 }
            year = full
        } else if words.count == 5 {
            // asctime.
            (month, day, time, year) = (monthNumber(words[1]), Int(words[2]), words[3], Int(words[4]))
        }
        guard let day, let month, let year, let time, (1...31).contains(day), (1...9999).contains(year) else {
            return nil
        }
        let clock = time.split(separator: ":").map { Int($0) }
        guard clock.count == 3, let hour = clock[0], let minute = clock[1], let second = clock[2],
            (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second)
        else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        return Date(timeIntervalSince1970: TimeInterval(days * 86_400 + hour * 3600 + minute * 60 + second))
    }

    private static func monthNumber(_ name: String) -> Int? {
        months.firstIndex(of: name.lowercased()).map { $0 + 1 }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
